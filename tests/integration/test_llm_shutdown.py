"""The LLM model's stop, in the real tritonserver.

After streamed traffic (the clients' gRPC streams, sync and asyncio, and the OpenAI endpoint's),
SIGTERM unloads the model: its finalize runs, a request still in flight gets its whole answer, and
the server exits on its own, before its exit timeout runs out. tritonserver 2.51 keeps the request
of a gRPC stream that is cancelled while it is finishing it, and the model with it: a client that
cancelled each stream after its final response made about one stop in three wait out the timeout,
so the clients read a finished stream to its status instead (clients/generator).

No vLLM engine outlives the model's stub: after refused, cancelled, whole and streamed requests
over HTTP and gRPC, the model's stub dies without finalize (SIGKILL here; after tritonserver's exit
timeout, the stub exits on its own), and the engine core processes it started go within seconds.
vLLM's engine core does not watch its parent: without the model's watcher (utils/orphans.py) it
lives on, reparented, with the model's memory.

Each test has a server of its own: stopping or killing it is what the test does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from contextlib import closing
from pathlib import Path

import openai
import pytest

from builder.llm.serving import EngineArgs, ServingSettings
from builder.server import TritonServer
from builder.targets.vllm_python import write_local_model
from clients.errors import TritonClientError
from clients.generator import AsyncGenerator, Generation, Generator, join
from openai_frontend.app import Settings
from openai_frontend.server import OpenAIServer
from openai_frontend.triton import TritonEngine
from tests.integration.fixtures.llm_repo import MODEL, START_TIMEOUT, checkpoint
from tests.integration.fixtures.processes import children, engine_core, stub, wait_gone

pytestmark = pytest.mark.integration

GONE_WITHIN_S = 10  # the watcher looks for its stub every 0.5 s
# As under `tritonforge serve`. Unloading (the drain, vLLM's shutdown, the stub's exit) takes about
# 10 s on two cores; a model still held makes tritonserver log TIMEOUT_EXPIRED and exit without it.
EXIT_TIMEOUT_S = 30
TIMEOUT_EXPIRED = "Exit timeout expired"
UNLOADED = f"successfully unloaded '{MODEL}'"
FINALIZED = "vllm_engine: engines stopped"  # the model's last line in finalize()
STREAMS = 16  # each stream cancelled after its end kept the model about one time in five
IN_FLIGHT_TOKENS = 48
COUNT = "Count: one, two,"


def _engine() -> EngineArgs:
    return EngineArgs(model="checkpoint", dtype="float32", max_model_len=512, max_num_seqs=4)


def _streamed_traffic(server: TritonServer) -> None:
    """Streams read to their end, one stopped at its last piece and one left early (cancelled)."""
    with Generator(server.grpc_url, MODEL) as gen:
        for _ in range(STREAMS):
            assert "".join(gen.stream(COUNT, max_tokens=6))
        assert gen.generate(COUNT, max_tokens=6).text  # one response, on a stream too
        pieces = gen.stream_pieces(COUNT, max_tokens=4, ignore_eos=True)
        with closing(pieces):  # the caller stops at the final piece without asking for more
            while next(pieces).finish_reason is None:
                pass
        with closing(gen.stream("Count to a thousand:", max_tokens=400, ignore_eos=True)) as long:
            next(long), next(long)

    async def aio() -> None:
        gen = AsyncGenerator(server.grpc_url, MODEL)
        for _ in range(4):
            assert "".join([piece async for piece in gen.stream(COUNT, max_tokens=6)])
        await gen.close()

    asyncio.run(aio())


def _openai_traffic(server: TritonServer) -> None:
    settings = Settings(api_key=None, max_body_bytes=1 << 20)
    with OpenAIServer(settings, TritonEngine(server.grpc_url), port=0) as endpoint:
        client = openai.OpenAI(base_url=endpoint.url, api_key="none", max_retries=0, timeout=120)
        for _ in range(4):
            chunks = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": COUNT}], max_tokens=6, stream=True
            )
            assert [c for c in chunks if c.choices and c.choices[0].finish_reason]


def _answer_in_flight(server: TritonServer, answers: list[Generation]) -> threading.Thread:
    """A thread generating IN_FLIGHT_TOKENS; returned once its first piece has come."""
    first = threading.Event()

    def run() -> None:
        with Generator(server.grpc_url, MODEL, timeout=120) as gen:
            pieces = []
            for piece in gen.stream_pieces(COUNT, max_tokens=IN_FLIGHT_TOKENS, ignore_eos=True):
                pieces.append(piece)
                first.set()
            answers.append(join(pieces))
        first.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert first.wait(120), "the request in flight got no first piece"
    return thread


def test_a_stop_after_streamed_traffic_unloads_the_model_before_the_exit_timeout(tmp_path: Path) -> None:
    write_local_model(tmp_path / "repo" / MODEL, _engine(), ServingSettings(), checkpoint=checkpoint())
    log = tmp_path / "server.log"
    server = TritonServer(tmp_path / "repo", log_path=log, exit_timeout_s=EXIT_TIMEOUT_S)
    server.start(timeout=START_TIMEOUT)
    answers: list[Generation] = []
    try:
        _streamed_traffic(server)
        _openai_traffic(server)
        in_flight = _answer_in_flight(server, answers)
    finally:
        server.stop()  # SIGTERM, then what is left of the group killed after the timeout
    in_flight.join(120)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert TIMEOUT_EXPIRED not in text, f"the model stayed loaded until the exit timeout (see {log})"
    assert UNLOADED in text and FINALIZED in text, f"the model did not unload (see {log})"
    assert [a.num_output_tokens for a in answers] == [IN_FLIGHT_TOKENS]  # the answer in flight, whole


def test_the_engine_dies_with_its_stub_after_every_kind_of_request(tmp_path: Path) -> None:
    write_local_model(tmp_path / "repo" / MODEL, _engine(), ServingSettings(), checkpoint=checkpoint())
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
