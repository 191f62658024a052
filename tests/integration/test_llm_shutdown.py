"""The local LLM model unloads when the server stops, in the real tritonserver: after streamed,
whole, cancelled and refused requests, SIGTERM unloads the model (its finalize runs, the engine
stops) and the server exits on its own, without waiting out its exit timeout.

Triton unloads a model only once nothing holds it: python_backend frees a request's response
factory, which holds the model, with the request's sender, so a sender kept after its final
response, or held in a reference cycle (seen after gRPC requests), keeps the model loaded until the
timeout expires and the server kills what is left: the engine core then outlives the stub.
The module has a server of its own: stopping it is what the test checks.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import pytest

from builder.llm.serving import EngineArgs, ServingSettings, write_local_model
from builder.server import TritonServer
from clients.errors import TritonClientError
from clients.generator import Generator
from tests.integration.fixtures.llm_repo import MODEL, START_TIMEOUT, checkpoint

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 20
TIMEOUT_EXPIRED = "Exit timeout expired"  # tritonserver's line when models are still loaded
FINALIZED = "vllm_engine: engines stopped"  # the model's last line in finalize()


def test_the_model_unloads_and_the_server_exits_on_its_own_after_every_kind_of_request(
    tmp_path: Path,
) -> None:
    engine = EngineArgs(model="checkpoint", dtype="float32", max_model_len=512, max_num_seqs=4)
    version = write_local_model(tmp_path / "repo" / MODEL, engine, ServingSettings())
    (version / "checkpoint").symlink_to(checkpoint())
    log = tmp_path / "server.log"
    server = TritonServer(tmp_path / "repo", log_path=log, exit_timeout_s=EXIT_TIMEOUT_S)
    server.start(timeout=START_TIMEOUT)
    try:
        for protocol in ("http", "grpc"):
            with Generator(server.grpc_url if protocol == "grpc" else server.http_url, MODEL) as gen:
                with pytest.raises(TritonClientError):
                    gen.generate("x " * 600, max_tokens=8)  # longer than the model: refused
                long = gen.stream("Count to a thousand:", max_tokens=400, ignore_eos=True)
                with closing(long):  # closed after its first pieces: the request is cancelled
                    next(long), next(long)
                assert gen.generate("The capital of France is", max_tokens=8).text
                assert "".join(gen.stream("Count: one, two,", max_tokens=8))
    finally:
        started = time.monotonic()
        server.stop(timeout=EXIT_TIMEOUT_S + 30)
        took = time.monotonic() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    assert TIMEOUT_EXPIRED not in text, f"the model stayed loaded ({took:.0f} s to stop; see {log})"
    assert FINALIZED in text, f"finalize() did not run to its end (see {log})"
