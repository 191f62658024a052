"""An LLM served by vLLM's engine inside the real tritonserver (``vllm_engine`` Python model).

The checkpoint is the zoo's (built by the LLM stages from the test cache; see
fixtures/llm_repo.py). One server for the module:
the engine takes 20-100 s to start on 2 cores. ``make bench`` measures overload at scale
(bench/llm_contention.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.server import TritonServer
from clients.errors import InvalidInput, RequestRejected, TritonClientError
from clients.generator import AsyncGenerator, Generator, join
from tests.integration.fixtures.llm_repo import (
    MODEL,
    SHARED_MAX_MODEL_LEN,
    SHARED_MAX_NUM_SEQS,
    SHARED_MAX_WAITING,
    engine_metric,
)
from tests.integration.fixtures.processes import children, engine_core, nice, stub

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
MAX_NUM_SEQS = SHARED_MAX_NUM_SEQS
MAX_WAITING = SHARED_MAX_WAITING
BOUND = MAX_NUM_SEQS + MAX_WAITING
MAX_MODEL_LEN = SHARED_MAX_MODEL_LEN
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
LONG = {"max_tokens": 400, "ignore_eos": True}
FILL_TOKENS = MAX_MODEL_LEN - 16  # as long as the model allows: a filler holds its place until closed
ITL_COUNT = "vllm:time_per_output_token_seconds_count"  # one per output token after a request's first
METRICS = (
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_per_output_token_seconds_count",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
)


@pytest.fixture(scope="module")
def server(llm_triton: TritonServer) -> TritonServer:
    """The session's shared LLM server (priority scheduling, SHARED_* bounds)."""
    return llm_triton


async def _until(
    condition: Callable[[], bool], what: str | Callable[[], str], timeout: float = 120.0
) -> None:
    """Poll ``condition`` (off the event loop) until it holds; fail naming ``what`` (a callable: its
    text once the time is up) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached in {timeout:.0f} s: {what() if callable(what) else what}")
        await asyncio.sleep(0.05)


async def _engine_empty(server: TritonServer) -> None:
    async with AsyncGenerator(server.grpc_url, MODEL, "grpc", timeout=120) as gen:
        await _until_engine_empty(server, gen)


async def _until_engine_empty(server: TritonServer, gen: AsyncGenerator, timeout: float = 120.0) -> None:
    """Until the engine counts no request running or waiting. Its gauges move only when it steps,
    so each poll first sends a one-token request, which makes it step (refused while it is full)."""

    def empty() -> bool:
        return (
            engine_metric(server, "vllm:num_requests_running") == 0
            and engine_metric(server, "vllm:num_requests_waiting") == 0
        )

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(RequestRejected):
            await gen.generate("Hi", max_tokens=1)
        if await asyncio.to_thread(empty):
            return
        assert time.monotonic() < deadline, f"the engine still has requests after {timeout:.0f} s"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_stream_pieces_join_to_the_whole(server: TritonServer, protocol: str) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with Generator(url, MODEL, protocol, timeout=120) as gen:
        whole = gen.generate(CHAT, max_tokens=24)
        pieces = list(gen.stream(CHAT, max_tokens=24))
    assert "Paris" in whole.text
    assert whole.finish_reason == "stop" and whole.num_input_tokens > 10 and whole.num_output_tokens >= 5
    # Several pieces (the tokens made while one was sent go in the next), joining to the whole.
    assert len(pieces) >= 2 and "".join(pieces) == whole.text


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_stream_pieces_arrive_as_made(server: TritonServer, protocol: str) -> None:
    """The pieces come as they are made (each token as soon as the piece before has been sent,
    with the tokens made meanwhile), spread over the decoding rather than sent at the end.

    Measured against the stream's own span and gaps, not against seconds, so the check holds
    however fast the CPU decodes. On a loaded machine the client (or the model's stub, which runs
    nicer than the engine) may be off the CPU for a few steps and then read the pieces made
    meanwhile at once, so a stream counts as spread when its pieces came in many separate bursts.
    """
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with Generator(url, MODEL, protocol, timeout=120) as gen:
        start = time.monotonic()
        pieces = gen.stream("Count from 1 to 40:", max_tokens=48, ignore_eos=True)
        times = [time.monotonic() - start for _ in pieces]
    assert len(times) > 4 and times == sorted(times)
    first, last = times[0], times[-1]
    spread = f"first piece at {first:.3f} s, last at {last:.3f} s"
    assert last - first > 0.5 * last, spread  # the first piece did not wait for the decoding
    # A burst ends at a gap longer than a tenth of the mean gap. Sent at the end the pieces make one
    # burst; sent as made, about one a decoding step, or (a loaded machine,
    # where the client read the pieces of a few steps at once) several. Stopped short when the
    # client closes the stream mid-way: test_cancelled_requests_free_their_capacity.
    gaps = np.diff(times)
    bursts = 1 + int(np.sum(gaps > 0.1 * np.mean(gaps)))
    assert bursts >= 4, f"{len(times)} pieces in {bursts} bursts; {spread}"


def test_the_stubs_threads_yield_to_the_engine(server: TritonServer) -> None:
    """Every thread of the model's stub runs 5 nicer than vLLM's engine processes, which keep the
    nice value they started with (the server's)."""
    pid, core = stub(server.pid or 0, MODEL), engine_core(server.pid or 0)
    engines = {p: nice(p) for p in [core, *children(core)]}
    assert set(engines.values()) == {nice(server.pid or 0)}, engines
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            threads[(task / "comm").read_text().strip() + f" {task.name}"] = nice(int(task.name))
    want = min(19, nice(core) + 5)
    assert len(threads) > 3, threads
    assert not {name: n for name, n in threads.items() if n != want}, f"threads not at nice {want}"


def test_generate_counts_and_length_finish(server: TritonServer) -> None:
    with Generator(server.http_url, MODEL, timeout=120) as gen:
        out = gen.generate("Once upon a time", max_tokens=7, ignore_eos=True)
    assert out.finish_reason == "length" and out.num_output_tokens == 7 and out.num_input_tokens >= 3


def _raw_stream_infer(server: TritonServer, flags: dict[str, bool], outputs: list[str] | None) -> Any:
    """One request the way Triton's vLLM-backend examples send it: plain tritonclient, gRPC stream."""
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put(error or result))
    inputs = []
    for name, value, dtype in [
        ("text_input", np.array([b"The capital of France is"], dtype=np.object_), "BYTES"),
        ("stream", np.array([False]), "BOOL"),
        ("sampling_parameters", np.array([b'{"temperature": "0", "max_tokens": "8"}'], np.object_), "BYTES"),
        *((flag, np.array([on]), "BOOL") for flag, on in flags.items()),
    ]:
        tensor = grpcclient.InferInput(name, [1], dtype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    wanted = None if outputs is None else [grpcclient.InferRequestedOutput(o) for o in outputs]
    client.async_stream_infer(MODEL, inputs, outputs=wanted, request_id="1")
    result = results.get(timeout=120)
    client.stop_stream()
    client.close()
    assert not isinstance(result, Exception), result
    return result


def test_vllm_backend_client_works_unchanged(server: TritonServer) -> None:
    result = _raw_stream_infer(server, {}, None)
    text = result.as_numpy("text_output")[0].decode()
    assert text.startswith("The capital of France is") and len(text) > len("The capital of France is")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_n_completions_each_with_their_own_tokens(server: TritonServer, protocol: str) -> None:
    """n = 3: every response has three elements per output (as Triton's vLLM backend sends them),
    which the client joins into three completions, streamed or whole."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    ask = {"max_tokens": 5, "temperature": 1.0, "seed": 3, "ignore_eos": True, "n": 3}
    with Generator(url, MODEL, protocol, timeout=120) as gen:
        whole = gen.generate("Once upon a time", **ask)
        pieces = list(gen.stream_pieces("Once upon a time", **ask))
    streamed = join(pieces)
    for out in (whole, streamed):
        assert [(c.num_output_tokens, c.finish_reason) for c in out.completions] == [(5, "length")] * 3
        assert all(c.text for c in out.completions)
    assert all(len(p.others) == 2 for p in pieces)


def test_only_the_outputs_asked_for_are_sent(server: TritonServer) -> None:
    """Asked for two of the three outputs it enabled, a client gets those two, again and again."""
    flags = {"return_num_output_tokens": True, "return_finish_reason": True}
    for _ in range(20):
        result = _raw_stream_infer(server, flags, ["text_output", "num_output_tokens"])
        assert result.as_numpy("finish_reason") is None
        assert result.as_numpy("num_output_tokens")[0] == 8
    assert server.is_ready()


BAD = [
    ({"prompt": ""}, "text_input is empty"),
    ({"prompt": "hello " * 600}, "max_model_len is 512"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"max_tokens": -3}, "max_tokens must be at least 1"),
    ({"top_p": 0.0}, "sampling_parameters.top_p: top_p must be in (0, 1]"),
    ({"stop": [""]}, "stop cannot contain an empty string"),
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"bogus_key": 1}, "unknown key(s) bogus_key"),
]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_bad_inputs_get_clear_errors_and_the_server_serves_on(server: TritonServer, protocol: str) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with Generator(url, MODEL, protocol, timeout=120) as gen:
        for case, expected in BAD:
            kwargs = dict(case)
            prompt = str(kwargs.pop("prompt", "hello"))
            max_tokens = int(kwargs.pop("max_tokens", 4))
            with pytest.raises(InvalidInput, match=expected.replace("(", r"\(").replace(")", r"\)")):
                gen.generate(prompt, max_tokens=max_tokens, **kwargs)
        assert gen.generate(CHAT, max_tokens=8).num_output_tokens > 0


@pytest.mark.parametrize(
    ("field", "raw", "expected"),
    [
        ("sampling_parameters", b"{not json", "sampling_parameters is not valid JSON"),
        ("sampling_parameters", b"[1, 2]", "sampling_parameters must be a JSON object"),
        ("text_input", b"caf\xe9 au lait", "text_input is not valid UTF-8"),
    ],
)
def test_malformed_raw_inputs(server: TritonServer, field: str, raw: bytes, expected: str) -> None:
    from tritonclient.grpc import service_pb2

    from clients.generator import grpc_request, piece_from_grpc

    fields = {"text_input": "hello", "sampling_parameters": '{"max_tokens": 2}'}
    request: service_pb2.ModelInferRequest = grpc_request(MODEL, fields)
    for tensor in request.inputs:
        if tensor.name == field:
            tensor.contents.bytes_contents[0] = raw
    with Generator(server.grpc_url, MODEL, timeout=60) as gen:
        responses = gen._stub.ModelStreamInfer(iter([request]), timeout=60)
        with pytest.raises(InvalidInput, match=expected):
            for response in list(responses):  # read to its end: a stream cancelled as it ends keeps the model
                piece_from_grpc(response)
        assert gen.generate("hello", max_tokens=2).num_output_tokens == 2


def test_streaming_with_the_prompt_echoed_is_refused(server: TritonServer) -> None:
    body = json.dumps({"text_input": "hi", "stream": True, "exclude_input_in_output": False}).encode()
    request = urllib.request.Request(f"{server.http_url}/v2/models/{MODEL}/generate_stream", body)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=60)
    assert caught.value.code == 400
    assert "exclude_input_in_output must be true when stream is true" in caught.value.read().decode()


async def _first_token_then_cancel(gen: AsyncGenerator) -> int:
    async with aclosing(gen.stream("Tell me a long story.", **LONG)) as pieces:
        async for _ in pieces:
            return 1
    return 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_cancelled_requests_free_their_capacity(server: TritonServer, protocol: str) -> None:
    """BOUND streams, each closed after its first piece: the engine stops them (counted in tokens,
    not timed) and their places take BOUND new requests, none refused."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    tokens_before = engine_metric(server, ITL_COUNT)

    async def run() -> tuple[list[int], float, list[int]]:
        async with AsyncGenerator(url, MODEL, protocol, timeout=120) as gen:
            started = await asyncio.gather(*[_first_token_then_cancel(gen) for _ in range(BOUND)])
            await _until_engine_empty(server, gen)
            generated = engine_metric(server, ITL_COUNT) - tokens_before
            done = await asyncio.gather(
                *[gen.generate("Hello", max_tokens=4, ignore_eos=True) for _ in range(BOUND)]
            )
            return started, generated, [g.num_output_tokens for g in done]

    started, generated, counts = asyncio.run(run())
    assert started == [1] * BOUND and counts == [4] * BOUND
    # Had the engine gone on with the closed streams, it would have made BOUND x 400 tokens.
    assert generated < BOUND * LONG["max_tokens"] / 4, generated
    asyncio.run(_until(lambda: engine_metric(server, "vllm:num_requests_running") == 0, "no request running"))
    assert engine_metric(server, "vllm:kv_cache_usage_perc") < 0.05


def test_overload_every_request_completes_or_is_refused_fast(server: TritonServer) -> None:
    """Refused at arrival, not after waiting: every refusal ends before the first admitted request
    has finished (within one of its 32 decoding steps), that is before any capacity was freed, on
    any CPU's pace."""
    offered = 10 * BOUND

    async def one(gen: AsyncGenerator) -> tuple[str, float]:
        start = time.monotonic()
        try:
            await gen.generate("Hello there", max_tokens=32, ignore_eos=True)
            return "completed", time.monotonic() - start
        except RequestRejected:
            return "refused", time.monotonic() - start
        except TritonClientError as exc:
            return f"error: {exc}", time.monotonic() - start

    async def run() -> list[tuple[str, float]]:
        async with AsyncGenerator(server.grpc_url, MODEL, timeout=300) as gen:
            return await asyncio.gather(*[one(gen) for _ in range(offered)])

    start = time.monotonic()
    outcomes = asyncio.run(run())
    wall = time.monotonic() - start
    kinds = Counter(kind for kind, _ in outcomes)
    refusals = sorted(t for kind, t in outcomes if kind == "refused")
    completions = sorted(t for kind, t in outcomes if kind == "completed")
    record = {
        "model": MODEL,
        "max_num_seqs": MAX_NUM_SEQS,
        "max_waiting": MAX_WAITING,
        "offered": offered,
        "completed": kinds["completed"],
        "refused": kinds["refused"],
        "errors": offered - kinds["completed"] - kinds["refused"],
        "lost": offered - sum(kinds.values()),
        "refusal_latency_ms_p50": round(1000 * refusals[len(refusals) // 2], 1) if refusals else None,
        "refusal_latency_ms_max": round(1000 * refusals[-1], 1) if refusals else None,
        "first_completion_ms": round(1000 * completions[0], 1) if completions else None,
        "wall_s": round(wall, 2),
        "server_ready_after": server.is_ready(),
    }
    assert record["lost"] == 0 and record["errors"] == 0, record
    assert kinds["completed"] >= BOUND and kinds["refused"] >= offered // 2, record
    # A response the client reads in the same batch as the first completion may be handled just
    # after it: a refusal counts as fast when it came within one decoding step of that completion.
    assert refusals[-1] < completions[0] * (1 + 1 / 32), record
    assert server.is_ready()
    engine_metric(server, "tritonforge:requests_refused_total")


def test_priority_reaches_the_engine(server: TritonServer) -> None:
    """With the running set full, a high-priority (lower value) request overtakes waiting low ones.

    The order is set by the test, not by timing: MAX_NUM_SEQS fillers (priority 5, as many tokens
    as the model's length allows) fill the running set; MAX_WAITING - 1 low requests (priority
    10), then one high (priority 0) join the engine's waiting line, each group sent once the
    engine's own gauges count the one before. Then one filler is closed, which frees one place:
    the high request must take it, and get its first piece before any low one.
    """
    order: list[str] = []  # the kind of each request that got a first piece, in the order they came
    started: set[str] = set()

    async def follow(gen: AsyncGenerator, who: str, priority: int, max_tokens: int) -> None:
        prompt = "Hi" if who.startswith("filler") else "Count to one hundred:"
        pieces = gen.stream_pieces(prompt, max_tokens=max_tokens, ignore_eos=True, priority=priority)
        async with aclosing(pieces):
            async for _ in pieces:
                if who not in started:
                    started.add(who)
                    order.append(who.split("-")[0])

    async def gauges_read(running: int, waiting: int) -> None:
        def reached() -> bool:
            return (
                engine_metric(server, "vllm:num_requests_running") == running
                and engine_metric(server, "vllm:num_requests_waiting") == waiting
            )

        await _until(reached, f"{running} requests running and {waiting} waiting")

    async def run() -> list[str]:
        async with AsyncGenerator(server.grpc_url, MODEL, timeout=300) as gen:
            fillers = [
                asyncio.create_task(follow(gen, f"filler-{i}", 5, FILL_TOKENS)) for i in range(MAX_NUM_SEQS)
            ]
            await gauges_read(MAX_NUM_SEQS, 0)  # the running set is full
            await _until(lambda: len(order) == MAX_NUM_SEQS, "a first piece for every filler")
            low = [asyncio.create_task(follow(gen, f"low-{i}", 10, 2)) for i in range(MAX_WAITING - 1)]
            await gauges_read(MAX_NUM_SEQS, MAX_WAITING - 1)
            high = asyncio.create_task(follow(gen, "high", 0, 2))
            await gauges_read(MAX_NUM_SEQS, MAX_WAITING)
            assert not any(f.done() for f in fillers), "a filler ended before the test closed it"
            fillers[0].cancel()  # one place frees
            await asyncio.wait_for(high, timeout=120)
            seen = list(order)
            for f in fillers[1:]:
                f.cancel()
            await asyncio.wait_for(asyncio.gather(*low), timeout=120)
            await asyncio.gather(*fillers, return_exceptions=True)
            # The closed fillers end in the engine later; on a busy machine, late enough to count
            # in the next test's metrics. Leave the engine empty, as each test here does.
            await _until_engine_empty(server, gen)
            return seen

    seen = asyncio.run(run())
    assert seen[MAX_NUM_SEQS] == "high", seen  # the first to get the freed place


def test_custom_metrics_next_to_tritons_own(server: TritonServer) -> None:
    with Generator(server.grpc_url, MODEL, timeout=120) as gen:
        gen.generate("Hi", max_tokens=2)  # a first token to time, whichever tests ran before
    ttft = "vllm:time_to_first_token_seconds_count"
    asyncio.run(_until(lambda: engine_metric(server, ttft) > 0, f"{ttft} above 0"))
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    assert "nv_inference_request_success" in text
    for name in METRICS:
        assert name in text, name


def test_the_vllm_backends_metrics_count_each_request(server: TritonServer) -> None:
    """The metrics of Triton's vLLM backend, with its labels and buckets, read from Triton's own
    /metrics: one request moves the token counters by its own counts and each per-request histogram
    by one (the update thread lags the response, so the counts are awaited, not slept for)."""
    labels = f'{{model="{MODEL}",version="1"}}'
    names = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    histograms = ("vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens", "vllm:request_params_n")
    counts = [f"{h}_count" for h in histograms]
    asyncio.run(_engine_empty(server))  # no earlier request's counts still to come
    read = (*names, *counts, "vllm:request_params_max_tokens_sum")
    before = {name: engine_metric(server, name) for name in read}
    with Generator(server.grpc_url, MODEL, timeout=120) as gen:
        out = gen.generate("Once upon a time", max_tokens=7, ignore_eos=True)
    after = {
        "vllm:prompt_tokens_total": before["vllm:prompt_tokens_total"] + out.num_input_tokens,
        "vllm:generation_tokens_total": before["vllm:generation_tokens_total"] + 7,
        "vllm:request_params_max_tokens_sum": before["vllm:request_params_max_tokens_sum"] + 7,
        **{name: before[name] + 1 for name in counts},
    }

    def read() -> str:
        found = {n: engine_metric(server, n) for n in after}
        return f"expected {after}, read {found}"

    asyncio.run(_until(lambda: all(engine_metric(server, n) == v for n, v in after.items()), read))
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    for name in names:
        assert f"{name}{labels}" in text, name
    ttft_le = [
        line.split('le="')[1].split('"')[0]
        for line in text.splitlines()
        if "vllm:time_to_first_token_seconds_bucket" in line
    ]
    assert ttft_le[:3] == ["0.001", "0.005", "0.01"] and ttft_le[-1] == "+Inf", ttft_le
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"):
        assert f"{gauge}{labels}" in text, gauge


def test_cli_generate_streams_to_the_terminal(server: TritonServer) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "clients", "-u", server.grpc_url, "generate", CHAT[0]["content"]]
    done = subprocess.run(
        [*command, "--model", MODEL, "--chat", "--max-tokens", "16"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Paris" in done.stdout
