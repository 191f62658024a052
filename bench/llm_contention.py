"""Rows 6 and 7 of ``bench.llm``: short requests beside long jobs, and an overload burst.

6. lanes: short requests' TTFT p99 (perf_analyzer, streaming) while long jobs (~600-token prompts,
   256 new tokens) run, with one engine for all and with a long-job lane placed as the model places
   it on this host (an engine on CPUs of its own, or folded into the one engine at lower priority);
7. overload: a burst of 10x what the engine holds (running + waiting) at once; completed vs
   refused, lost, refusal latency, and a request served after.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clients.errors import RequestRejected, TritonClientError
from clients.generator import AsyncGenerator, Generator
from clients.perf.llm import LLMLoad, run_llm_perf
from clients.perf.llm_prompts import Prompt

Server = Callable[..., AbstractContextManager[Any]]
Row = tuple[str, str, str, bool | None]

SHORT_LOAD = LLMLoad(output_tokens=16, concurrency=(4,), requests_per_user=6, min_requests=24)
LONG_STREAMS, LONG_TOKENS, LONG_LANE_MIN = 2, 256, 600
LANE_GAIN = 1.2  # what an engine of its own must give short requests' TTFT p99 to be worth its cores
OVERLOAD_SEQS, OVERLOAD_WAITING, OVERLOAD_TOKENS = 16, 16, 16


@contextmanager
def long_jobs(url: str, model: str, prompts: list[str]) -> Iterator[dict[str, int]]:
    """LONG_STREAMS clients sending long jobs back to back on a thread of their own until closed."""
    stop, counts = threading.Event(), {"completed": 0, "refused": 0}

    async def client(gen: AsyncGenerator, offset: int) -> None:
        i = offset
        while not stop.is_set():
            try:
                await gen.generate(prompts[i % len(prompts)], max_tokens=LONG_TOKENS, ignore_eos=True)
                counts["completed"] += 1
            except RequestRejected:
                counts["refused"] += 1
                await asyncio.sleep(0.2)
            i += LONG_STREAMS

    async def main() -> None:
        async with AsyncGenerator(url, model, timeout=600) as gen:
            await asyncio.gather(*[client(gen, k) for k in range(LONG_STREAMS)])

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="long-jobs", daemon=True)
    thread.start()
    time.sleep(3.0)  # the long prefills under way before the measured load starts
    try:
        yield counts
    finally:
        stop.set()
        thread.join(timeout=600)


def long_prompts(chats: list[Any]) -> list[str]:
    """Distinct ~600-token prompts (no shared prefix for the cache to reuse) from the prompt set."""
    questions = [chat[-1]["content"] for chat in chats]
    return [
        "Answer each of these in detail:\n" + "\n".join(f"- {q}" for q in questions[k:] + questions[:k]) * 2
        for k in range(len(questions))
    ]


def lanes(server: Server, checkpoint: Path, model: str, chats: list[Any], short: list[Prompt],
          work: Path) -> dict[str, Any]:  # fmt: skip
    """TTFT of short requests beside long jobs: one engine for all, then a lane for the long ones."""
    from builder.llm.serving import Lane, ServingSettings
    from builder.python_models.vllm_engine.model import parse_lanes, place_lanes, placement_note

    lane = Lane("long", min_tokens=LONG_LANE_MIN, max_num_seqs=LONG_STREAMS, max_waiting=0)
    cpus = sorted(os.sched_getaffinity(0))
    placed = place_lanes(parse_lanes(json.dumps([lane.as_json()])), cpus)  # as the model places it
    out: dict[str, Any] = {"long_streams": LONG_STREAMS, "long_tokens": LONG_TOKENS,
                           "placement": placement_note(placed, len(cpus)),
                           "own_engine": not placed[1].shares_default}  # fmt: skip
    for name, settings in (("one_engine", ServingSettings(max_waiting=64)),
                           ("long_lane", ServingSettings(max_waiting=64, lanes=(lane,)))):  # fmt: skip
        with server(checkpoint, settings=settings, tag=name) as triton:
            with long_jobs(triton.grpc_url, model, long_prompts(chats)) as counts:
                report = run_llm_perf(triton.grpc_url, model, short, SHORT_LOAD, out_dir=work / name)
            p = report.points[0]
            out[name] = {**asdict(p.client), "long_jobs": dict(counts)}
    return out


def lanes_rows(m: dict[str, Any] | None) -> list[Row]:
    if not m:
        return []
    one, own = m["one_engine"], m["long_lane"]
    ratio = one["ttft_ms_p99"] / own["ttft_ms_p99"]
    where = "own engine" if m.get("own_engine", True) else "folded, lower priority"
    # A lane with an engine of its own must earn it; folded into the one engine it costs nothing.
    passed = ratio >= LANE_GAIN if m.get("own_engine", True) else None
    return [(f"6. lanes: short requests' TTFT p99 at c{SHORT_LOAD.concurrency[0]} beside "
             f"{m['long_streams']} long jobs",
             f"one engine {one['ttft_ms_p99']:.0f} ms / long lane ({where}) {own['ttft_ms_p99']:.0f} ms "
             f"({ratio:.2f}x); p50 {one['ttft_ms_p50']:.0f} / {own['ttft_ms_p50']:.0f} ms",
             f">= {LANE_GAIN}x with an engine of its own", passed)]  # fmt: skip


async def _one(gen: AsyncGenerator) -> tuple[str, float]:
    start = time.monotonic()
    try:
        await gen.generate("Hello there", max_tokens=OVERLOAD_TOKENS, ignore_eos=True)
        return "completed", time.monotonic() - start
    except RequestRejected:
        return "refused", time.monotonic() - start
    except TritonClientError as exc:
        return f"error: {exc}", time.monotonic() - start


def overload(server: Server, checkpoint: Path, model: str) -> dict[str, Any]:
    """10x (max_num_seqs + max_waiting) requests at once; then one more, which must be served."""
    from builder.llm.serving import ServingSettings

    offered = 10 * (OVERLOAD_SEQS + OVERLOAD_WAITING)

    async def burst(url: str) -> list[tuple[str, float]]:
        async with AsyncGenerator(url, model, timeout=600) as gen:
            return await asyncio.gather(*[_one(gen) for _ in range(offered)])

    settings = ServingSettings(max_waiting=OVERLOAD_WAITING)
    with server(checkpoint, settings=settings, tag="overload", max_num_seqs=OVERLOAD_SEQS) as triton:
        start = time.monotonic()
        outcomes = asyncio.run(burst(triton.grpc_url))
        wall = time.monotonic() - start
        with Generator(triton.grpc_url, model, timeout=120) as gen:
            after = gen.generate("Hello there", max_tokens=4, ignore_eos=True).num_output_tokens == 4
        ready = triton.is_ready()
    kinds = Counter(kind for kind, _ in outcomes)
    refused = sorted(t for kind, t in outcomes if kind == "refused")
    completed = sorted(t for kind, t in outcomes if kind == "completed")
    return {
        "offered": offered, "max_num_seqs": OVERLOAD_SEQS, "max_waiting": OVERLOAD_WAITING,
        "completed": kinds["completed"], "refused": kinds["refused"],
        "errors": sum(v for k, v in kinds.items() if k.startswith("error")),
        "lost": offered - len(outcomes), "wall_s": round(wall, 2),
        "refusal_ms_p99": _p99_ms(refused), "completed_ms_p99": _p99_ms(completed),
        "served_after": after, "ready_after": ready,
    }  # fmt: skip


def _p99_ms(values: list[float]) -> float | None:
    return round(1000 * values[min(len(values) - 1, int(0.99 * len(values)))], 1) if values else None


def overload_rows(m: dict[str, Any] | None) -> list[Row]:
    if not m:
        return []
    ok = m["lost"] == 0 and m["errors"] == 0 and m["served_after"] and m["ready_after"]
    return [(f"7. overload: {m['offered']} requests at once, 10x what the engine holds "
             f"({m['max_num_seqs']} running + {m['max_waiting']} waiting)",
             f"{m['completed']} completed, {m['refused']} refused, {m['lost']} lost, {m['errors']} errors; "
             f"refusal p99 {m['refusal_ms_p99']} ms; served after: {m['served_after']}",
             "none lost, refused fast, serving after", ok)]  # fmt: skip
