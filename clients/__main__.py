"""`python -m clients`: quick calls from a shell.

python -m clients -u 127.0.0.1:8001 ready --model simple
python -m clients -u 127.0.0.1:8001 metadata simple
python -m clients -u http://127.0.0.1:8000 infer simple -i INPUT0='[[1,2,...]]' -i INPUT1=ones.npy
python -m clients -u 127.0.0.1:8001 embed "a sentence" "another one"
python -m clients -u 127.0.0.1:8001 rerank "a query" "a passage" "another one" --model ranker_pipeline
python -m clients -u 127.0.0.1:8001 classify cat.jpg dog.png --top-k 3
python -m clients -u 127.0.0.1:8001 detect street.jpg --model detr_pipeline --threshold 0.7
python -m clients -u 127.0.0.1:8001 generate "What is the capital of France?" --chat --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import triton_to_np_dtype

from .client import Client
from .detection import Detector
from .errors import TritonClientError
from .generator import Generator
from .model import ModelInfo
from .tasks import Classifier, Embedder, Reranker


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clients", description="Call a Triton server.")
    parser.add_argument("-u", "--url", default="127.0.0.1:8001", help="host:port, grpc://... or http://...")
    parser.add_argument("-p", "--protocol", choices=["grpc", "http"], help="default: from the URL, else grpc")
    parser.add_argument(
        "-t", "--timeout", type=float, default=60.0, help="seconds per call, retries included"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ready = sub.add_parser("ready", help="wait until the server (and a model) is ready")
    ready.add_argument("--model")
    ready.add_argument("--wait", type=float, default=30.0)
    for name in ("metadata", "config"):
        sub.add_parser(name, help=f"print a model's {name} as JSON").add_argument("model")
    infer = sub.add_parser("infer", help="run one inference, print the outputs as JSON")
    infer.add_argument("model")
    infer.add_argument("-i", "--input", action="append", default=[], metavar="NAME=JSON|FILE.npy")
    infer.add_argument("-o", "--output", action="append", help="outputs to return (default: all)")
    infer.add_argument("--shm", action="store_true", help="send tensors through system shared memory")
    embed = sub.add_parser("embed", help="print embeddings of texts as JSON")
    embed.add_argument("texts", nargs="+")
    embed.add_argument("--model", default="minilm_embed")
    rerank = sub.add_parser("rerank", help="print documents' relevance to a query as JSON, best first")
    rerank.add_argument("query")
    rerank.add_argument("documents", nargs="+")
    rerank.add_argument("--model", required=True, help="a text-ranking checkpoint's <name>_pipeline")
    rerank.add_argument("--top-n", type=int)
    classify = sub.add_parser("classify", help="print the top classes of images")
    classify.add_argument("images", nargs="+")
    classify.add_argument("--model", default="efficientnet_lite0_image")
    classify.add_argument("--top-k", type=int, default=5)
    detect = sub.add_parser("detect", help="print the boxes an object detector finds in images")
    detect.add_argument("images", nargs="+")
    detect.add_argument("--model", required=True, help="the detector's pipeline (<name>_pipeline)")
    detect.add_argument("--threshold", type=float, help="the lowest score kept (default: the model's)")
    generate = sub.add_parser("generate", help="stream an LLM's answer to the terminal")
    generate.add_argument("prompt")
    generate.add_argument("--model", default="smollm2")
    generate.add_argument("--chat", action="store_true", help="send the prompt as a user chat message")
    generate.add_argument("--max-tokens", type=int, default=128)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--stop", action="append", help="a stop string (repeatable)")
    generate.add_argument("--priority", type=int, help="lower runs first (models with a priority input)")
    return parser


def _generate(args: argparse.Namespace) -> None:
    prompt: Any = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    with Generator(args.url, args.model, args.protocol, timeout=args.timeout) as gen:
        pieces = gen.stream(prompt, args.max_tokens, args.temperature, args.top_p, args.stop, args.priority)
        for piece in pieces:
            print(piece, end="", flush=True)
    print()


def _read_input(info: ModelInfo, item: str) -> tuple[str, NDArray[Any]]:
    name, sep, value = item.partition("=")
    if not sep or name not in info.inputs:
        raise SystemExit(f"--input wants NAME=VALUE with NAME one of {', '.join(info.inputs)}; got {item!r}")
    if value.endswith(".npy"):
        return name, np.load(value, allow_pickle=False)
    datatype = info.inputs[name].datatype
    if datatype == "BYTES":
        return name, np.array(json.loads(value), dtype=object)
    return name, np.array(json.loads(value), dtype=triton_to_np_dtype(datatype))


def _jsonable(array: NDArray[Any]) -> Any:
    if array.dtype == object:
        return [_jsonable(a) if isinstance(a, np.ndarray) else a.decode() for a in array]
    return array.tolist()


def _run(args: argparse.Namespace) -> None:
    kwargs = {"protocol": args.protocol, "timeout": args.timeout}
    if args.command == "generate":
        _generate(args)
        return
    if args.command == "embed":
        with Embedder(args.url, args.model, **kwargs) as embedder:
            print(json.dumps(embedder.embed(args.texts).tolist()))
        return
    if args.command == "rerank":
        with Reranker(args.url, args.model, **kwargs) as reranker:
            ranked = reranker.rerank(args.query, args.documents, args.top_n)
            print(json.dumps([{"index": r.index, "score": r.score, "document": r.document} for r in ranked]))
        return
    if args.command == "classify":
        with Classifier(args.url, args.model, **kwargs) as classifier:
            for path, preds in zip(args.images, classifier.classify(args.images, args.top_k), strict=True):
                print(path + ": " + ", ".join(f"{p.label} ({p.score:.4g})" for p in preds))
        return
    if args.command == "detect":
        with Detector(args.url, args.model, **kwargs) as detector:
            for path, found in zip(args.images, detector.detect(args.images, args.threshold), strict=True):
                boxes = ", ".join(
                    f"{d.label} {d.score:.3g} [{', '.join(f'{v:.0f}' for v in d.box)}]" for d in found
                )
                print(f"{path}: {boxes or 'nothing'}")
        return
    with Client(args.url, **kwargs) as client:
        if args.command == "ready":
            client.wait_until_ready(args.wait, model=args.model)
            print("ready")
        elif args.command in ("metadata", "config"):
            print(json.dumps(getattr(client, args.command)(args.model), indent=2))
        else:
            info = client.model(args.model)
            inputs = dict(_read_input(info, item) for item in args.input)
            outputs = client.infer(args.model, inputs, args.output, shm=args.shm or None)
            print(json.dumps({name: _jsonable(value) for name, value in outputs.items()}))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _run(args)
    except TritonClientError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
