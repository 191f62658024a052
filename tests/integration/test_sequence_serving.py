"""Stateful models served with server-side state by the real tritonserver (local target): two
interleaved sequences each match ONNX Runtime run over the same chunks in a loop, over gRPC and
HTTP, sync and asyncio; the end flag frees a sequence's state; clients never see the state tensors."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.configs import read_config
from builder.pipeline import build
from builder.records import BuildOptions
from builder.server import TritonServer
from clients import NO_RETRY, AsyncClient, Client, InvalidInput, TritonClientError
from tests.builder.fixtures.recurrent import CHUNKS, chunks, onnx_loop, write_project

pytestmark = pytest.mark.integration

MODELS = ("vad", "rnn")  # state batched on axis 1 (max_batch_size 0); batched state with a START control


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("recurrent")
    spec = write_project(root / "project")
    repo = root / "repository"
    build(BuildOptions(spec, repo, target="local", cache_dir=root / "cache", log=lambda _: None))
    # Sequences the tests leave open count as in flight until they idle out: no need to wait.
    with TritonServer(repo, log_path=root / "server.log", exit_timeout_s=2) as server:
        yield server, root / "project"


def repository_index(server: TritonServer) -> dict[str, dict[str, str]]:
    post = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(post, timeout=10) as response:
        return {m["name"]: m for m in json.load(response)}


def request(model: str, chunk: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": chunk if model == "vad" else chunk.reshape(1, -1)}


def output(model: str, y: np.ndarray) -> np.ndarray:
    return y if model == "vad" else y.reshape(1, -1)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", MODELS)
def test_interleaved_sequences_each_match_a_local_loop(
    served: tuple[TritonServer, Path], model: str, protocol: str
) -> None:
    server, project = served
    url = server.grpc_url if protocol == "grpc" else server.http_url
    a, b = chunks(11), chunks(12)
    want_a, want_b = onnx_loop(model, project, a), onnx_loop(model, project, b)
    with Client(url, protocol) as client:
        assert set(client.model(model).inputs) == {"x"} and set(client.model(model).outputs) == {"y"}
        with client.sequence(model) as seq_a, client.sequence(model) as seq_b:
            assert seq_a.sequence_id != seq_b.sequence_id
            for i in range(CHUNKS):
                last = i == CHUNKS - 1
                got_a = seq_a.infer(request(model, a[i]), end=last)["y"]
                got_b = seq_b.infer(request(model, b[i]), end=last)["y"]
                np.testing.assert_allclose(output(model, got_a), want_a[i], atol=1e-5)
                np.testing.assert_allclose(output(model, got_b), want_b[i], atol=1e-5)
            assert seq_a.ended and seq_b.ended
            with pytest.raises(InvalidInput, match="has ended"):
                seq_a.infer(request(model, a[0]))
        # The chunks matter: the second chunk alone, from zeros, differs from the loop's.
        alone = onnx_loop(model, project, a[1:2])[0]
        assert not np.allclose(alone, want_a[1], atol=1e-3)


@pytest.mark.parametrize("model", MODELS)
def test_end_frees_the_state_and_an_id_starts_afresh(served: tuple[TritonServer, Path], model: str) -> None:
    server, project = served
    first, second = chunks(21, 3), chunks(22, 4)
    with Client(server.grpc_url) as client:
        seq = client.sequence(model, sequence_id=4242)
        for i, chunk in enumerate(first):
            seq.infer(request(model, chunk), end=i == len(first) - 1)
        again = client.sequence(model, sequence_id=4242)  # the same id, after the end: zeros again
        got = [output(model, again.infer(request(model, c), end=False)["y"]) for c in second]
    for got_y, want_y in zip(got, onnx_loop(model, project, second), strict=True):
        np.testing.assert_allclose(got_y, want_y, atol=1e-5)


def test_asyncio_sequences_over_both_protocols(served: tuple[TritonServer, Path]) -> None:
    server, project = served
    stream = chunks(31, 4)
    want = onnx_loop("rnn", project, stream)

    async def run(url: str, protocol: str) -> list[np.ndarray]:
        async with AsyncClient(url, protocol) as client, client.sequence("rnn") as seq:
            outs = []
            for i, chunk in enumerate(stream):
                outs.append((await seq.infer(request("rnn", chunk), end=i == len(stream) - 1))["y"])
            return outs

    for url, protocol in ((server.grpc_url, "grpc"), (server.http_url, "http")):
        got = asyncio.run(run(url, protocol))
        for got_y, want_y in zip(got, want, strict=True):
            np.testing.assert_allclose(got_y, want_y, atol=1e-5)


def test_a_request_without_a_sequence_id_is_refused_by_the_server(served: tuple[TritonServer, Path]) -> None:
    server, _ = served
    with Client(server.grpc_url, retry_policy=NO_RETRY) as client, pytest.raises(TritonClientError):
        client.infer("vad", {"x": chunks(1, 1)[0]})


@pytest.mark.parametrize(
    ("target", "backends"), [("cpu", {"onnxruntime"}), ("gpu", {"tensorrt", "onnxruntime"})]
)
def test_container_repositories_of_stateful_models_pass_the_server_s_checks(
    tmp_path: Path, target: str, backends: set[str]
) -> None:
    """Built through the pipeline, every model's sequence batcher and implicit state pass Triton's
    validation; each stops only where the pip server has no backend library."""
    spec = write_project(tmp_path / "project")
    repo = tmp_path / "repository"
    build(BuildOptions(spec, repo, target=target, cache_dir=tmp_path / "cache", log=lambda _: None))
    configs = {p.parent.name: read_config(p) for p in repo.glob("*/config.pbtxt")}
    assert set(configs) >= {"vad", "rnn"} and all(c.sequence_batching.state for c in configs.values())
    server = TritonServer(repo, extra_args=["--exit-on-error=false", "--strict-readiness=false"])
    with server:
        index = repository_index(server)
    seen = set()
    for name in configs:
        reason = index[name].get("reason", "")
        assert index[name]["state"] == "UNAVAILABLE" and "unable to find backend library" in reason, reason
        seen |= {b for b in backends if f"backend '{b}'" in reason}
    assert seen == backends
