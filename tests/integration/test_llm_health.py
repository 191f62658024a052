"""The local LLM model after its vLLM engine dies, in the real tritonserver: as Triton's vLLM backend
with ENABLE_VLLM_HEALTH_CHECK (its ci/L0_check_health_vllm), the request in flight ends with an
error, the model refuses work as UNAVAILABLE and unloads itself, so it stops being READY.

The test kills the engine's core process, so the module has a server of its own (explicit model
control, as a model can unload itself only there), not the session's shared one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from builder.llm.serving import EngineArgs, ServingSettings
from builder.server import TritonServer
from builder.targets.vllm_python import write_local_model
from clients.errors import TritonClientError
from clients.generator import Generator
from tests.integration.fixtures.llm_repo import MODEL, START_TIMEOUT, checkpoint
from tests.integration.fixtures.processes import engine_core

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("llm-health")
    engine = EngineArgs(model="checkpoint", dtype="float32", max_model_len=512, max_num_seqs=4)
    write_local_model(root / "repo" / MODEL, engine, ServingSettings(), checkpoint=checkpoint())
    server = TritonServer(
        root / "repo", log_path=root / "server.log", exit_timeout_s=15,
        model_control="explicit", load_models=[MODEL],
    )  # fmt: skip
    server.start(timeout=START_TIMEOUT)
    try:
        yield server
    finally:
        server.stop()


def model_ready(server: TritonServer) -> bool:
    try:
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{MODEL}/ready", timeout=5) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError:
        return False


def test_a_dead_engine_ends_the_request_in_flight_and_the_model_stops_being_ready(
    server: TritonServer,
) -> None:
    assert model_ready(server)
    outcome: list[BaseException | str] = []
    first = threading.Event()

    def stream() -> None:
        try:
            with Generator(server.grpc_url, MODEL, timeout=120) as gen:
                for _ in gen.stream("Count to one thousand:", max_tokens=400, ignore_eos=True):
                    first.set()
            outcome.append("completed")
        except TritonClientError as exc:
            outcome.append(exc)
        finally:
            first.set()

    streaming = threading.Thread(target=stream)
    streaming.start()
    assert first.wait(120)
    os.kill(engine_core(server.pid or 0), signal.SIGKILL)
    streaming.join(120)
    assert not streaming.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], TritonClientError), outcome  # ended, with an error, not hanging
    deadline = time.monotonic() + 60
    while model_ready(server):
        assert time.monotonic() < deadline, "the model is still READY 60 s after its engine died"
        time.sleep(0.1)
    assert server.is_running()  # the server serves on; only the model went
    with Generator(server.grpc_url, MODEL, timeout=60) as gen, pytest.raises(TritonClientError):
        gen.generate("Hi", max_tokens=2)
