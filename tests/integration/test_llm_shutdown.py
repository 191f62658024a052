"""No vLLM engine outlives the model's stub, in the real tritonserver: after refused, cancelled,
whole and streamed requests over HTTP and gRPC, the model's stub dies without finalize (SIGKILL
here; after tritonserver's exit timeout, the stub exits on its own), and the engine core processes
it started go within seconds.

vLLM's engine core does not watch its parent: without the model's watcher (utils/orphans.py) it
lives on, reparented, with the model's memory. The same happens when the stub dies after Triton's
exit timeout expired with the model still loaded (Triton's gRPC and HTTP frontends sometimes hold
a model after its requests ended: Triton's own vLLM backend meets it too, server issue 7626).
The module has a server of its own: killing it is what the test does.
"""

from __future__ import annotations

import os
import signal
from contextlib import closing
from pathlib import Path

import pytest

from builder.llm.serving import EngineArgs, ServingSettings
from builder.server import TritonServer
from builder.targets.vllm_python import write_local_model
from clients.errors import TritonClientError
from clients.generator import Generator
from tests.integration.fixtures.llm_repo import MODEL, START_TIMEOUT, checkpoint
from tests.integration.fixtures.processes import children, engine_core, stub, wait_gone

pytestmark = pytest.mark.integration

GONE_WITHIN_S = 10  # the watcher looks for its stub every 0.5 s


def test_the_engine_dies_with_its_stub_after_every_kind_of_request(tmp_path: Path) -> None:
    engine = EngineArgs(model="checkpoint", dtype="float32", max_model_len=512, max_num_seqs=4)
    write_local_model(tmp_path / "repo" / MODEL, engine, ServingSettings(), checkpoint=checkpoint())
    server = TritonServer(tmp_path / "repo", log_path=tmp_path / "server.log", exit_timeout_s=15)
    server.start(timeout=START_TIMEOUT)
    try:
        for url in (server.http_url, server.grpc_url):
            with Generator(url, MODEL) as gen:
                with pytest.raises(TritonClientError):
                    gen.generate("x " * 600, max_tokens=8)  # longer than the model: refused
                long = gen.stream("Count to a thousand:", max_tokens=400, ignore_eos=True)
                with closing(long):  # closed after its first pieces: the request is cancelled
                    next(long), next(long)
                assert gen.generate("The capital of France is", max_tokens=8).text
                assert "".join(gen.stream("Count: one, two,", max_tokens=8))
        assert server.pid is not None
        core, model_stub = engine_core(server.pid), stub(server.pid, MODEL)
        under = set(children(model_stub))
        os.kill(model_stub, signal.SIGKILL)
        left = wait_gone(under, GONE_WITHIN_S)  # the watcher itself among them, gone too
        assert core not in left, f"vLLM's engine core {core} outlived its stub by {GONE_WITHIN_S} s"
        assert left == [], f"processes of the killed stub still running after {GONE_WITHIN_S} s: {left}"
    finally:
        server.stop()  # kills what is left of the server's process group
