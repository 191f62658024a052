"""Hugging Face checkpoints of the five tasks, given as ``name``, ``source`` and ``task``, build into
one repository, serve from one tritonserver, and answer as transformers' own ``pipeline`` does for
the same folder: embeddings (cosine), labels and scores, per-token labels and grouped entities; a
cross-encoder's pair scores as sentence-transformers' ``CrossEncoder.predict``, and through the
OpenAI endpoint's /v1/rerank and /v1/score, for the Cohere SDK and the Jina CLI's client too."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from builder.pipeline import build
from builder.records import BuildOptions
from builder.server import TritonServer
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.builder.fixtures import hf_checkpoints as hf

pytestmark = pytest.mark.integration

SCORE_TOLERANCE = 1e-4
START_TIMEOUT = 420
IMAGES = [hf.image_bytes(seed, size) for seed, size in ((1, (48, 40)), (2, (32, 32)), (3, (64, 20)))]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf")
    hf.bert(root / "bert", "base")
    hf.bert(root / "sentiment", "sequence")
    hf.bert(root / "ner", "token")
    hf.vit(root / "vit")
    hf.cross_encoder(root / "ranker")
    (root / "texts.txt").write_text("\n".join(hf.TEXTS) + "\n", encoding="utf-8")
    for folder, seeds in (("calib", range(10, 18)), ("eval", range(20, 24))):
        (root / folder).mkdir()
        for seed in seeds:
            (root / folder / f"{seed}.png").write_bytes(hf.image_bytes(seed))
    models = [
        {"name": "embed", "source": "bert", "task": "feature-extraction"},
        {"name": "sentiment", "source": "sentiment", "task": "text-classification"},
        {"name": "ner", "source": "ner", "task": "token-classification"},
        {"name": "vision", "source": "vit", "task": "image-classification",
         "precisions": ["fp32", "fp16", "int8"], "calibration": {"data": "calib"},
         "evaluation": {"data": "eval"}},
        {"name": "ranker", "source": "ranker", "task": "text-ranking",
         "precisions": ["fp32", "int8_dynamic"]},
    ]  # fmt: skip
    (root / "models.yaml").write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def server(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = project / "model_repository"
    opts = BuildOptions(
        project / "models.yaml", repo, target="local", cache_dir=project / "cache", log=lambda _: None
    )
    build(opts)
    server = TritonServer(
        repo, log_path=tmp_path_factory.mktemp("hf-triton") / "server.log", exit_timeout_s=5
    )
    # Seven Python models import transformers (and with it torch) as they load: on two busy cores
    # that takes longer than the default 120 s.
    server.start(timeout=START_TIMEOUT)
    try:
        yield server
    finally:
        server.stop()


def _infer(server: TritonServer, model: str, name: str, items: list[Any], outputs: list[str]) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    data = np.array([[i.encode() if isinstance(i, str) else i] for i in items], dtype=object)
    tensor = grpcclient.InferInput(name, list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])


def _pipeline(task: str, folder: Path) -> Any:
    from transformers import pipeline

    return pipeline(task, model=str(folder))


def _cosine(a: NDArray[Any], b: NDArray[Any]) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_feature_extraction_matches_the_pipeline(server: TritonServer, project: Path) -> None:
    pipe = _pipeline("feature-extraction", project / "bert")
    for text in hf.TEXTS:
        result = _infer(server, "embed_pipeline", "TEXT", [text], ["LAST_HIDDEN_STATE", "EMBEDDING"])
        expected = np.asarray(pipe(text)[0], dtype=np.float32)  # [tokens, hidden]
        hidden = result.as_numpy("LAST_HIDDEN_STATE")[0]
        assert hidden.shape == expected.shape
        assert _cosine(hidden, expected) > 0.9999
        assert _cosine(result.as_numpy("EMBEDDING")[0], expected.mean(axis=0)) > 0.9999


def test_text_classification_matches_the_pipeline(server: TritonServer, project: Path) -> None:
    pipe = _pipeline("text-classification", project / "sentiment")
    result = _infer(server, "sentiment_pipeline", "TEXT", hf.TEXTS, ["LABEL", "SCORE", "SCORES"])
    for i, text in enumerate(hf.TEXTS):
        expected = pipe(text, top_k=None)
        by_label = {e["label"]: e["score"] for e in expected}
        assert result.as_numpy("LABEL")[i][0].decode() == expected[0]["label"]
        assert result.as_numpy("SCORE")[i][0] == pytest.approx(expected[0]["score"], abs=SCORE_TOLERANCE)
        ordered = [by_label[hf.SENTIMENT[k]] for k in sorted(hf.SENTIMENT)]
        np.testing.assert_allclose(result.as_numpy("SCORES")[i], ordered, atol=SCORE_TOLERANCE)


def test_token_classification_matches_the_pipeline(server: TritonServer, project: Path) -> None:
    tokens_pipe = _pipeline("token-classification", project / "ner")
    outputs = ["TOKENS", "TOKEN_LABELS", "TOKEN_SCORES", "ENTITIES"]
    grouped = 0
    for text in hf.TEXTS:
        result = _infer(server, "ner_pipeline", "TEXT", [text], outputs)
        per_token = tokens_pipe(text)  # "O" left out, as the pipeline does
        labels = [v.decode() for v in result.as_numpy("TOKEN_LABELS")[0]]
        scores = result.as_numpy("TOKEN_SCORES")[0]
        served = [(i, lab, s) for i, (lab, s) in enumerate(zip(labels, scores, strict=True)) if lab != "O"]
        assert [lab for _, lab, _ in served] == [e["entity"] for e in per_token]
        np.testing.assert_allclose(
            [s for *_, s in served], [e["score"] for e in per_token], atol=SCORE_TOLERANCE
        )
        expected = tokens_pipe(text, aggregation_strategy="simple")
        entities = json.loads(result.as_numpy("ENTITIES")[0][0])
        assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in entities] == [
            (e["entity_group"], e["word"], e["start"], e["end"]) for e in expected
        ]
        for got, want in zip(entities, expected, strict=True):
            assert got["score"] == pytest.approx(float(want["score"]), abs=SCORE_TOLERANCE)
        grouped += len(expected)
    assert grouped > 0  # the random weights tag something, so the grouping is exercised


@pytest.fixture(scope="module")
def vision_tolerance(project: Path) -> float:
    """How far the served vision variant's scores may be from the pipeline's: fp32's 1e-4, plus
    what its verification measured its logits to move by, through the softmax (a probability
    moves by at most e^(2d) - 1 ~ 2d for logits that each move by d), four times over for images
    the verification did not see. The build serves the fastest variant that verified on this host
    (fp16 or int8 where they win), so the margin follows the variant served, never assumes fp32."""
    manifest = json.loads((project / "model_repository" / "manifest.json").read_text())
    entry = manifest["models"]["vision"]
    moved = entry["verification"][entry["served"]]["metrics"]["logits"]["max_abs"]
    return SCORE_TOLERANCE + 4 * 2 * moved


def test_image_classification_matches_the_pipeline(
    server: TritonServer, project: Path, vision_tolerance: float
) -> None:
    import io

    from PIL import Image

    pipe = _pipeline("image-classification", project / "vit")
    result = _infer(server, "vision_pipeline", "IMAGE", IMAGES, ["LABEL", "SCORE", "SCORES"])
    for i, data in enumerate(IMAGES):
        expected = pipe(Image.open(io.BytesIO(data)), top_k=len(hf.IMAGE_LABELS))
        by_label = {e["label"]: e["score"] for e in expected}
        assert result.as_numpy("LABEL")[i][0].decode() == expected[0]["label"]
        assert result.as_numpy("SCORE")[i][0] == pytest.approx(expected[0]["score"], abs=vision_tolerance)
        ordered = [by_label[hf.IMAGE_LABELS[k]] for k in sorted(hf.IMAGE_LABELS)]
        np.testing.assert_allclose(result.as_numpy("SCORES")[i], ordered, atol=vision_tolerance)


# Pairs of the fixtures' words: short ones, and a document longer than the checkpoint's 64 tokens
# (cut, never the query: only_second, which CrossEncoder's longest_first does too for a short query).
PAIRS = [(q, d) for q in hf.QUERIES for d in hf.TEXTS] + [(hf.QUERIES[0], " ".join(hf.TEXTS * 6))]


def _rank(server: TritonServer, pairs: list[tuple[str, str]]) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    tensors = []
    for name, column in (("TEXT", [q for q, _ in pairs]), ("TEXT_PAIR", [d for _, d in pairs])):
        data = np.array([[t.encode()] for t in column], dtype=object)
        tensors.append(grpcclient.InferInput(name, list(data.shape), "BYTES"))
        tensors[-1].set_data_from_numpy(data)
    return client.infer("ranker_pipeline", tensors)


# Ten different documents, more than the ranker's max_batch_size (8): split into requests and joined.
DOCUMENTS = [
    *hf.TEXTS,
    *hf.QUERIES,
    "the dog ran in the park",
    "a very good film",
    "tea and coffee",
    "bad tea",
]


@pytest.fixture(scope="module")
def margins(project: Path) -> tuple[float, float]:
    """How far the served ranker's scores may be from CrossEncoder.predict's, and from its own for
    the same pair in another batch: the fp32 variant's 1e-4 and 1e-5; an int8_dynamic variant's
    logit max_abs through a sigmoid (<= 1/4 of it) for both, since ONNX Runtime's dynamic
    quantization takes one scale for a whole batch (docs/spec.md)."""
    manifest = json.loads((project / "model_repository" / "manifest.json").read_text())
    served = manifest["models"]["ranker"]["served"]
    return (SCORE_TOLERANCE, 1e-5) if served.startswith("fp32") else (0.25 / 4, 0.25 / 4)


def test_text_ranking_matches_cross_encoder_predict_alone_and_in_any_batch(
    server: TritonServer, project: Path, margins: tuple[float, float]
) -> None:
    from sentence_transformers import CrossEncoder

    tolerance, between = margins
    expected = CrossEncoder(str(project / "ranker")).predict(PAIRS)
    together = _rank(server, PAIRS[:8])  # a request of the model's max_batch_size, padded to its longest
    alone = [float(_rank(server, [pair]).as_numpy("SCORE")[0, 0]) for pair in PAIRS]
    np.testing.assert_allclose(together.as_numpy("SCORE")[:, 0], expected[:8], atol=tolerance)
    np.testing.assert_allclose(alone, expected, atol=tolerance)
    np.testing.assert_allclose(together.as_numpy("SCORE")[:, 0], alone[:8], atol=between)
    tokens = _rank(server, PAIRS[-2:]).as_numpy("NUM_TOKENS")[:, 0].tolist()
    assert tokens[0] < 64 < tokens[1]  # the long pair's length before it was cut to 64


def test_a_query_too_long_for_its_document_fails_with_the_reason(server: TritonServer) -> None:
    with pytest.raises(
        InferenceServerException, match="cannot tokenize to 64 tokens, truncation only_second"
    ):
        _rank(server, [(" ".join(hf.TEXTS * 6), "paris is a city")])


KEY = "k3y"


@pytest.fixture(scope="module")
def endpoint(server: TritonServer) -> Iterator[str]:
    """The OpenAI endpoint over this server: its base URL, without ``/v1``."""
    with OpenAIServer(Settings(api_key=KEY), TritonEngine(server.grpc_url), port=0) as running:
        yield running.url.removesuffix("/v1")


def _post(endpoint: str, path: str, body: dict[str, Any]) -> Any:
    import httpx

    return httpx.post(endpoint + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def _alone(server: TritonServer, query: str, documents: list[str]) -> list[float]:
    """The pipeline's score of each pair sent on its own."""
    return [float(_rank(server, [(query, d)]).as_numpy("SCORE")[0, 0]) for d in documents]


def test_rerank_and_score_through_the_endpoint_are_the_pipelines(
    endpoint: str, server: TritonServer, margins: tuple[float, float]
) -> None:
    between = margins[1]
    documents = [d for q, d in PAIRS if q == hf.QUERIES[0]]
    served = _alone(server, hf.QUERIES[0], documents)
    body = _post(endpoint, "/v1/rerank", {"query": hf.QUERIES[0], "documents": documents,
                                          "truncate_prompt_tokens": -1}).json()  # fmt: skip
    assert body["model"] == "ranker_pipeline" and len(body["results"]) == len(documents)
    got = [r["relevance_score"] for r in body["results"]]
    assert got == sorted(got, reverse=True)  # best first
    for r in body["results"]:
        assert r["relevance_score"] == pytest.approx(served[r["index"]], abs=between)
        assert r["document"] == {"text": documents[r["index"]], "multi_modal": None}
    counts = _rank(server, [(hf.QUERIES[0], d) for d in documents]).as_numpy("NUM_TOKENS")[:, 0]
    assert body["usage"]["prompt_tokens"] == sum(min(int(n), 64) for n in counts)  # the long one as cut
    scored = _post(endpoint, "/v1/score", {"queries": hf.QUERIES[0], "documents": documents[:3]}).json()
    assert [d["score"] for d in scored["data"]] == pytest.approx(served[:3], abs=between)
    too_long = _post(endpoint, "/v1/rerank", {"query": hf.QUERIES[0], "documents": documents})
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "input_tokens"
    wrong = _post(endpoint, "/v1/rerank", {"model": "embed_pipeline", "query": "a", "documents": ["b"]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "model"


def test_the_cohere_sdk_and_the_jina_cli_client_rerank_through_the_endpoint(
    endpoint: str, server: TritonServer, margins: tuple[float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    import cohere
    from jina_cli import api as jina

    between = margins[1]
    served = _alone(server, hf.QUERIES[1], DOCUMENTS)

    def check(indexes: list[int], scores: list[float]) -> None:
        assert len(indexes) == 2 and scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([served[i] for i in indexes], abs=between)
        assert min(scores) >= sorted(served)[-3] - between  # two of the best three

    v1 = cohere.Client(api_key=KEY, base_url=endpoint)  # POST /v1/rerank
    v2 = cohere.ClientV2(api_key=KEY, base_url=endpoint)  # POST /v2/rerank
    for client in (v1, v2):
        reply = client.rerank(model="ranker_pipeline", query=hf.QUERIES[1], documents=DOCUMENTS, top_n=2)
        check([r.index for r in reply.results], [r.relevance_score for r in reply.results])
    objects = v1.rerank(
        query=hf.QUERIES[1], documents=[{"text": d} for d in DOCUMENTS], return_documents=False
    )
    assert len(objects.results) == len(DOCUMENTS) and objects.results[0].document is None
    monkeypatch.setattr(jina, "API_BASE", endpoint)  # the client's one address, api.jina.ai
    results = jina.rerank(hf.QUERIES[1], DOCUMENTS, api_key=KEY, model="ranker_pipeline", top_n=2)
    check([r["index"] for r in results], [r["relevance_score"] for r in results])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_client_reranker_ranks_as_cross_encoder_rank(
    server: TritonServer, project: Path, margins: tuple[float, float], protocol: str
) -> None:
    from sentence_transformers import CrossEncoder

    from clients import Reranker

    url = server.grpc_url if protocol == "grpc" else server.http_url
    with Reranker(url, "ranker_pipeline") as reranker:
        ranked = reranker.rerank(hf.QUERIES[0], DOCUMENTS)
        scores = reranker.score([(hf.QUERIES[0], d) for d in DOCUMENTS])
        assert reranker.score([]).shape == (0,)
    expected = CrossEncoder(str(project / "ranker")).predict([(hf.QUERIES[0], d) for d in DOCUMENTS])
    np.testing.assert_allclose(scores, expected, atol=margins[0])
    assert [r.score for r in ranked] == sorted(scores.tolist(), reverse=True)
    assert [r.document for r in ranked] == [DOCUMENTS[r.index] for r in ranked]
    if margins[1] < 1e-4:  # fp32: the order is CrossEncoder.rank's
        order = CrossEncoder(str(project / "ranker")).rank(hf.QUERIES[0], DOCUMENTS)
        assert [r.index for r in ranked] == [e["corpus_id"] for e in order]


def test_the_command_line_reranks(server: TritonServer, capsys: pytest.CaptureFixture[str]) -> None:
    from clients.__main__ import main

    args = [
        "-u",
        server.grpc_url,
        "rerank",
        hf.QUERIES[1],
        *hf.TEXTS,
        "--model",
        "ranker_pipeline",
        "--top-n",
        "2",
    ]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed) == 2 and printed[0]["score"] >= printed[1]["score"]


PIPELINES = {
    "embed_pipeline": ("TEXT", ["LAST_HIDDEN_STATE", "EMBEDDING"]),
    "sentiment_pipeline": ("TEXT", ["LABEL", "SCORE", "SCORES"]),
    "ner_pipeline": ("TEXT", ["TOKENS", "TOKEN_LABELS", "TOKEN_SCORES", "ENTITIES"]),
    "vision_pipeline": ("IMAGE", ["LABEL", "SCORE", "SCORES"]),
}


def _entities(array: NDArray[Any]) -> list[tuple[Any, ...]]:
    return [
        (e["entity_group"], e["word"], e["start"], e["end"], round(float(e["score"]), 4))
        for e in json.loads(array.reshape(-1)[0])
    ]


@pytest.mark.parametrize("model", sorted(PIPELINES))
def test_concurrent_single_requests_answer_as_each_sent_alone(server: TritonServer, model: str) -> None:
    """Requests of different lengths sent at once (which the dynamic batcher may hand over together)
    each get the answer they get alone: no padding to another request's length, no mixing."""
    name, outputs = PIPELINES[model]
    items: list[Any] = IMAGES if name == "IMAGE" else [t * (1 + i % 3) for i, t in enumerate(hf.TEXTS)]
    items = (items * 4)[:16]
    alone = [_infer(server, model, name, [item], outputs) for item in items]
    client = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    done: list[Any] = [None] * len(items)
    finished = threading.Semaphore(0)

    def keep(i: int) -> Any:
        def callback(result: Any, error: Any) -> None:
            done[i] = error if error is not None else result
            finished.release()

        return callback

    for i, item in enumerate(items):
        data = np.array([[item.encode() if isinstance(item, str) else item]], dtype=object)
        tensor = grpcclient.InferInput(name, list(data.shape), "BYTES")
        tensor.set_data_from_numpy(data)
        wanted = [grpcclient.InferRequestedOutput(o) for o in outputs]
        client.async_infer(model, [tensor], keep(i), outputs=wanted)
    for _ in items:
        assert finished.acquire(timeout=120)
    for i, (got, want) in enumerate(zip(done, alone, strict=True)):
        assert not isinstance(got, Exception), got
        for output in outputs:
            a, b = got.as_numpy(output), want.as_numpy(output)
            assert a.shape == b.shape, (model, i, output, a.shape, b.shape)
            if output == "ENTITIES":  # JSON with float scores: batched kernels round differently
                assert _entities(a) == _entities(b), (model, i)
            elif a.dtype == object:
                assert a.tolist() == b.tolist(), (model, i, output)
            else:
                np.testing.assert_allclose(a, b, atol=1e-5, err_msg=f"{model} request {i} {output}")


def test_every_variant_was_verified_against_the_checkpoint(server: TritonServer, project: Path) -> None:
    manifest = json.loads((project / "model_repository" / "manifest.json").read_text())
    vision = manifest["models"]["vision"]["verification"]
    onnxruntime = {v: r["passed"] for v, r in vision.items() if r["runtime"] == "onnxruntime"}
    assert onnxruntime == {"fp32": True, "fp16": True, "int8": True}
    assert {r["runtime"] for r in vision.values()} == {"onnxruntime", "openvino"}
    for name in ("embed", "sentiment", "ner", "ranker"):
        assert manifest["models"][name]["verification"]["fp32"]["passed"]


def test_bytes_that_are_no_image_or_no_utf8_text_get_an_error_naming_what_is_wrong(
    server: TritonServer,
) -> None:
    with pytest.raises(InferenceServerException, match="cannot decode image"):
        _infer(server, "vision_pipeline", "IMAGE", [b"not an image"], ["LABEL"])
    with pytest.raises(InferenceServerException, match="not valid UTF-8"):
        _infer(server, "sentiment_pipeline", "TEXT", [b"\xff\xfe"], ["LABEL"])
