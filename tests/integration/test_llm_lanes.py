"""Lanes: long jobs get an engine of their own, so short requests are served while they run.

One server, two vLLM engines in one model: ``default`` (max_num_seqs 4) and ``long`` (prompt +
max_tokens >= 200; one sequence, no waiting line, pinned to CPU 1). Skipped without vLLM or a
checkpoint (see fixtures/llm_repo.py).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator

import pytest

from builder.llm.serving import EngineArgs, Lane, ServingSettings
from builder.server import TritonServer
from clients.errors import RequestRejected
from clients.generator import AsyncGenerator
from tests.integration.fixtures.llm_repo import MODEL, llm_server

pytestmark = pytest.mark.integration

# Past the lane's 200, and long enough that the short ones end while it decodes (240 was outrun once).
LONG_TOKENS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    engine = EngineArgs(
        model="checkpoint", dtype="float32", max_model_len=512, max_num_seqs=4, kv_cache_space_gib=0.5
    )
    lanes = (Lane("long", min_tokens=200, max_num_seqs=1, max_waiting=0, cpus="1"),)
    with llm_server(tmp_path_factory.mktemp("lanes"), engine, ServingSettings(lanes=lanes)) as s:
        yield s


def test_short_requests_are_served_while_the_long_lane_is_full(server: TritonServer) -> None:
    """Ordered by control, not by timing: two long requests are sent together (the lane holds one,
    with no waiting line, so exactly one is refused; sent one after the other, the engine could
    finish the first before the second came), and the short ones are done while the long one is
    still coming (fewer of its tokens counted than it asked for)."""

    async def run() -> tuple[list[int | BaseException], list[int], int]:
        async with AsyncGenerator(server.grpc_url, MODEL, timeout=300) as gen:
            running = asyncio.Event()
            pieces: list[int] = []

            async def long(prompt: str) -> int:
                mine = 0
                async for piece in gen.stream_pieces(prompt, max_tokens=LONG_TOKENS, ignore_eos=True):
                    pieces.append(piece.num_output_tokens)
                    mine += piece.num_output_tokens
                    running.set()
                return mine

            both = [asyncio.create_task(long(p)) for p in ("Tell me a story.", "Another story.")]
            await asyncio.wait_for(running.wait(), timeout=300)
            shorts = [(await gen.generate("Hi", max_tokens=4)).num_output_tokens for _ in range(3)]
            long_tokens_by_then = sum(pieces)
            return await asyncio.gather(*both, return_exceptions=True), shorts, long_tokens_by_then

    longs, shorts, by_then = asyncio.run(run())
    refused = [r for r in longs if isinstance(r, RequestRejected)]
    assert len(refused) == 1 and "lane 'long'" in str(refused[0]), longs
    assert "engine is full" in str(refused[0])
    assert [r for r in longs if not isinstance(r, BaseException)] == [LONG_TOKENS], longs
    assert all(0 < n <= 4 for n in shorts), shorts
    assert by_then < LONG_TOKENS, by_then  # the short ones did not wait for the long one


def test_each_lane_reports_its_own_metrics(server: TritonServer) -> None:
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    # The default lane has the labels of Triton's vLLM backend (model, version); a lane adds its name.
    for labels in (f'model="{MODEL}",version="1"', f'lane="long",model="{MODEL}",version="1"'):
        assert f"vllm:num_requests_running{{{labels}}}" in text, text[-2000:]
    refused = [line for line in text.splitlines() if line.startswith("tritonforge:requests_refused_total")]
    assert any('lane="long"' in line and not line.endswith(" 0") for line in refused), refused
