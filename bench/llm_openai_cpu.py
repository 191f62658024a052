"""CPU per streamed token of the serving processes, side by side in one run at 16 streams: vLLM's
own OpenAI server, the project's OpenAI path (client -> ``python -m openai_frontend`` ->
gRPC -> tritonserver -> the ``vllm_engine`` stub -> its engine core) and the project's gRPC path
(perf_analyzer's gRPC stream -> tritonserver -> stub -> engine core).

Every server is up at once with ``bench.llm``'s checkpoint, dtype and engine settings; each round
loads each side once (perf_analyzer, 16 streams, 64 new tokens, ``ignore_eos``, greedy, the same
prompts; ``/v1/completions`` on both OpenAI servers), in an order rotated from round to round. A
side's CPU is read from ``/proc/<pid>/stat`` (user + system) of its processes before and after its
run, and divided by the tokens it generated (requests x 64). ``serving`` is every process but the
engine core: vLLM's API server; the endpoint, tritonserver and the stub (the gRPC path: tritonserver
and the stub). The engine core (the model's forward passes and the scheduler) is counted apart, as
``engine``. A side's figure is its rounds' CPU over their tokens.

    python -m bench.llm_openai_cpu [--rounds N] [--concurrency C ...] [--min-gap-ms MS]
                                   [--max-responses-per-s N] [--model-json KEY=VALUE ...]
                                   [--key KEY] [--out FILE]

Beside the CPU, each side's stream as a reader sees it, from perf_analyzer's profile export: the p90
gap between text updates (responses carrying tokens), tokens per update, time to first token p50
and tokens/s. ``--concurrency``: streams at once (each its own runs, one server start for all);
``--min-gap-ms``: the project's model's ``stream_min_gap_ms`` (the spec's ``streaming.min_gap_ms``;
default: the spec's default); ``--max-responses-per-s``: its ``stream_max_responses_per_s`` (the
spec's ``streaming.max_responses_per_s``; default: the model's own for the host's CPUs).
``--model-json``: engine arguments added to the project's model's ``model.json`` (JSON values),
for trying a setting; the record says which. Under ``bench.run``
(``make bench``) it writes ``bench/results/llm_openai_cpu.json`` with the summary row; run alone,
each concurrency's record goes to ``runs.<KEY>_c<C>`` of ``bench/results/llm_openai_cpu_runs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import llm
from bench.common import Row, cpu_seconds, machine
from builder.estimate.rss import children
from builder.spec.llm import Streaming
from clients.perf import profile_export
from clients.perf.llm import LLMLoad, run_llm_perf
from clients.perf.llm_prompts import Prompt, load_chats, shape

WORK = llm.RESULTS / "work" / "llm_openai_cpu"
RUNS = llm.RESULTS / "llm_openai_cpu_runs.json"
LOAD = LLMLoad(output_tokens=llm.NEW_TOKENS, concurrency=(16,), requests_per_user=3, min_requests=6)
SIDES = ("vllm", "openai", "grpc")
WHAT = {
    "vllm": "vLLM's own OpenAI server (`/v1/completions`)",
    "openai": "the project's OpenAI endpoint (`/v1/completions`) -> gRPC -> tritonserver -> vllm_engine",
    "grpc": "the project's gRPC path (perf_analyzer's gRPC stream) -> tritonserver -> vllm_engine",
}
ROUNDS = 3
DEFAULT_STREAMING = Streaming()  # the spec's defaults
TARGET = 2.0  # the OpenAI path's serving CPU per token, at most this many times vLLM's


@dataclass(frozen=True)
class Pids:
    """The processes of every side: vLLM's API server, the endpoint, tritonserver, the stub."""

    vllm: int
    endpoint: int
    server: int
    stub: int

    def serving(self, side: str) -> tuple[int, ...]:
        return {"vllm": (self.vllm,), "openai": (self.endpoint, self.server, self.stub),
                "grpc": (self.server, self.stub)}[side]  # fmt: skip

    def engine_root(self, side: str) -> int:
        """The process whose descendants are the side's engine core."""
        return self.vllm if side == "vllm" else self.stub


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError):  # gone
        return 0.0


def cpu_of(pids: Sequence[int]) -> dict[int, float]:
    return {pid: _cpu(pid) for pid in pids}


@dataclass(frozen=True)
class Reading:
    """One side's run: its tokens and the CPU seconds of its processes; its streams' gaps between
    text updates (ms, every request's) and time to first token p50 (ms)."""

    tokens: int
    tokens_per_s: float
    serving_s: dict[str, float]  # per process role
    engine_s: float
    wall_s: float
    gaps_ms: tuple[float, ...] = ()
    updates: int = 0  # responses carrying tokens
    ttft_ms_p50: float = 0.0

    @property
    def serving_us_per_token(self) -> float:
        return 1e6 * sum(self.serving_s.values()) / self.tokens


ROLES = {"vllm": ("api_server",), "openai": ("endpoint", "tritonserver", "stub"),
         "grpc": ("tritonserver", "stub")}  # fmt: skip


def measure_side(
    side: str, pids: Pids, urls: Mapping[str, str], prompts: list[Prompt], folder: Path, load: LLMLoad = LOAD
) -> Reading:
    serving = pids.serving(side)
    engine = children(pids.engine_root(side))
    before, engine_before, start = cpu_of(serving), sum(cpu_of(engine).values()), time.perf_counter()
    kind = "triton" if side == "grpc" else "openai"
    report = run_llm_perf(urls[side], llm.MODEL, prompts, load, out_dir=folder, service_kind=kind)
    after, engine_after, wall = cpu_of(serving), sum(cpu_of(engine).values()), time.perf_counter() - start
    concurrency = load.concurrency[0]
    point = llm.point(report, concurrency)
    tokens = int(point["requests"]) * load.output_tokens  # ignore_eos: every request makes them all
    used = {role: round(after[p] - before[p], 3) for role, p in zip(ROLES[side], serving, strict=True)}
    gaps, updates = stream_gaps(folder / "raw" / f"{llm.MODEL}_llm_concurrency_{concurrency}.profile.json")
    return Reading(tokens, round(float(point["output_tokens_per_s"]), 1), used,
                   round(engine_after - engine_before, 3), round(wall, 2), gaps, updates,
                   round(float(point["ttft_ms_p50"]), 1))  # fmt: skip


def stream_gaps(export: Path) -> tuple[tuple[float, ...], int]:
    """Every gap (ms) between two text updates of one stream, and the updates, of a profile export."""
    requests = profile_export.load(export)[0].requests
    gaps = [(b - a) / 1e6 for r in requests for a, b in zip(r.response_ns, r.response_ns[1:], strict=False)]
    return tuple(round(g, 2) for g in gaps), sum(len(r.response_ns) for r in requests)


def stub_pid(server_pid: int) -> int:
    from bench.common import stub_of

    found = [pid for pid in children(server_pid) if stub_of(pid, llm.MODEL)]
    if not found:
        raise RuntimeError(f"no stub of model '{llm.MODEL}' under tritonserver {server_pid}")
    return found[0]


def write_repo(
    repo: Path, checkpoint: Path, extra: Mapping[str, Any], streaming: Streaming = DEFAULT_STREAMING
) -> None:
    """The zoo's LLM as ``bench.llm`` serves it, ``extra`` added to its model.json."""
    import shutil

    from builder.llm.serving import EngineArgs, ServingSettings
    from builder.python_models.vllm_engine.contract import ENGINE_ARGS_FILE
    from builder.targets.vllm_python import write_local_model

    shutil.rmtree(repo, ignore_errors=True)
    engine = EngineArgs(model=str(checkpoint.resolve()), **llm.ENGINE)
    settings = ServingSettings(
        max_waiting=64, stream_min_gap_ms=streaming.min_gap_ms,
        stream_max_responses_per_s=streaming.max_responses_per_s,
    )  # fmt: skip
    version = write_local_model(repo / llm.MODEL, engine, settings)
    if extra:
        path = version / ENGINE_ARGS_FILE
        path.write_text(json.dumps({**json.loads(path.read_text()), **extra}, indent=2) + "\n")


@contextmanager
def servers(
    checkpoint: Path, extra: Mapping[str, Any], streaming: Streaming = DEFAULT_STREAMING
) -> Iterator[tuple[Pids, dict[str, str]]]:
    """tritonserver with the model, the OpenAI endpoint in its own process, vLLM's own server."""
    from bench.openai_endpoint import start_endpoint
    from builder.server import TritonServer, find_free_port

    write_repo(WORK / "repo", checkpoint, extra, streaming)
    server = TritonServer(WORK / "repo", log_path=WORK / "server.log")
    server.start(timeout=llm.START_TIMEOUT)
    try:
        port = find_free_port()
        endpoint = start_endpoint(server.grpc_url, port)
        try:
            with llm.vllm_openai(checkpoint) as vllm:
                pids = Pids(vllm.pid, endpoint.pid, server.pid, stub_pid(server.pid))
                yield pids, {"vllm": vllm.url, "openai": f"127.0.0.1:{port}", "grpc": server.grpc_url}
        finally:
            endpoint.terminate()
            endpoint.wait(10)
    finally:
        server.stop()


def measure(
    checkpoint: Path, rounds: int, extra: Mapping[str, Any], loads: Sequence[LLMLoad] = (LOAD,),
    streaming: Streaming = DEFAULT_STREAMING,
) -> list[dict[str, list[Reading]]]:  # fmt: skip
    """Each load's readings per side; every load's rounds against the same servers."""
    prompts = shape(load_chats(llm.ROOT / "calibration" / llm.MODEL / "perf.json"), checkpoint, None)
    done: list[dict[str, list[Reading]]] = [{side: [] for side in SIDES} for _ in loads]
    with servers(checkpoint, extra, streaming) as (pids, urls):
        for r in range(rounds):
            for load, readings in zip(loads, done, strict=True):
                c = load.concurrency[0]
                for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
                    got = measure_side(
                        side, pids, urls, prompts, WORK / f"c{c}" / side / f"round{r + 1}", load
                    )
                    readings[side].append(got)
                    print(f"c={c} round {r + 1} {side}: {got.serving_us_per_token:.0f} us/token serving, "
                          f"{got.tokens_per_s} tokens/s, ttft p50 {got.ttft_ms_p50} ms, gap p90 "
                          f"{percentile(got.gaps_ms, 90):.1f} ms", flush=True)  # fmt: skip
    return done


def percentile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def summary(done: Mapping[str, list[Reading]]) -> dict[str, Any]:
    """Per side: CPU µs per token from the rounds' sums, per role, the engine core apart."""
    out: dict[str, Any] = {}
    for side, readings in done.items():
        tokens = sum(r.tokens for r in readings)
        roles = {
            role: round(1e6 * sum(r.serving_s[role] for r in readings) / tokens, 1) for role in ROLES[side]
        }
        out[side] = {
            "what": WHAT[side], "tokens": tokens,
            "serving_us_per_token": round(sum(roles.values()), 1),
            "round_serving_us_per_token": [round(r.serving_us_per_token, 1) for r in readings],
            "by_process_us_per_token": roles,
            "engine_core_us_per_token": round(1e6 * sum(r.engine_s for r in readings) / tokens, 1),
            "round_tokens_per_s": [r.tokens_per_s for r in readings],
            **stream_figures(readings),
        }  # fmt: skip
    base = out["vllm"]["serving_us_per_token"]
    for side in out:
        out[side]["vs_vllm"] = round(out[side]["serving_us_per_token"] / base, 2)
    return out


def stream_figures(readings: Sequence[Reading]) -> dict[str, Any]:
    """The streams as a reader sees them, over the rounds: gaps between text updates, tokens per
    update, time to first token (the rounds' p50s) and tokens/s."""
    gaps = [g for r in readings for g in r.gaps_ms]
    updates = sum(r.updates for r in readings)
    ttfts = [r.ttft_ms_p50 for r in readings if r.ttft_ms_p50]
    return {
        "gap_ms_p50": round(percentile(gaps, 50), 1), "gap_ms_p90": round(percentile(gaps, 90), 1),
        "tokens_per_update": round(sum(r.tokens for r in readings) / updates, 2) if updates else None,
        "ttft_ms_p50": round(percentile(ttfts, 50), 1) if ttfts else None,
        "tokens_per_s": round(sum(r.tokens_per_s for r in readings) / len(readings), 1),
        # tokens over the runs' wall time, perf_analyzer's start included: alike for every side,
        # where perf_analyzer's own count differs between servers that report usage differently
        "tokens_per_wall_s": round(sum(r.tokens for r in readings) / sum(r.wall_s for r in readings), 1),
    }  # fmt: skip


def rows(sides: Mapping[str, Any]) -> list[Row]:
    o, v, g = sides["openai"], sides["vllm"], sides["grpc"]
    ratio = o["serving_us_per_token"] / v["serving_us_per_token"]
    return [Row(
        "LLM OpenAI path: serving CPU per streamed token at 16 streams, / vLLM's own server",
        f"{ratio:.2f}x ({o['serving_us_per_token']:.0f} / {v['serving_us_per_token']:.0f} µs; "
        f"gRPC path {g['serving_us_per_token']:.0f} µs)",
        f"<= {TARGET:g}x", ratio <= TARGET,
    )]  # fmt: skip


def record(
    info: Mapping[str, Any], done: Mapping[str, list[Reading]], rounds: int, extra: Mapping[str, Any],
    started: float, load: LLMLoad = LOAD, streaming: Streaming = DEFAULT_STREAMING,
) -> dict[str, Any]:  # fmt: skip
    """``info``: bench.common.machine() when the measurement began (its date and load average)."""
    interval = extra.get("stream_interval", 1)  # the project's engine's; vLLM's server: 1
    reason = llm.DTYPE_REASON[0] if llm.DTYPE_REASON else None
    return {**info, "engine": llm.ENGINE, "stream_interval": interval,
            "stream_min_gap_ms": streaming.min_gap_ms,
            "stream_max_responses_per_s": streaming.max_responses_per_s,
            "model_json_extra": dict(extra), "dtype_reason": reason,
            "load": asdict(load), "ignore_eos": True, "rounds": rounds,
            "minutes": round((time.monotonic() - started) / 60, 1),
            "load_avg_after": [round(x, 2) for x in os.getloadavg()], "sides": summary(done)}  # fmt: skip


def run(opts: Any) -> tuple[dict[str, Any], list[Row]]:
    """bench.run's entry: the record and the summary row (one 'skipped' row without vLLM)."""
    reason = llm.skipped()
    if reason:
        return {"skipped": reason}, [Row("LLM OpenAI path: CPU per token", f"skipped: {reason}", "-", None)]
    checkpoint = llm.checkpoint()
    info, started = machine(), time.monotonic()
    (done,) = measure(checkpoint, ROUNDS, {})
    rec = record(info, done, ROUNDS, {}, started)
    return rec, rows(rec["sides"])


def model_json_arg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-json {text}: write KEY=VALUE (VALUE as JSON)")
    return key, json.loads(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.llm_openai_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--concurrency", type=int, nargs="+", default=list(LOAD.concurrency))
    ap.add_argument("--min-gap-ms", type=int, default=DEFAULT_STREAMING.min_gap_ms)
    ap.add_argument("--max-responses-per-s", type=int, default=None, help="default: the model's for the host")
    ap.add_argument("--model-json", type=model_json_arg, action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--key", default="latest")
    ap.add_argument("--what", default="", help="what this run measured (kept in the record)")
    ap.add_argument("--out", type=Path, default=RUNS)
    opts = ap.parse_args(argv)
    reason = llm.skipped()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    checkpoint, extra = llm.checkpoint(), dict(opts.model_json)
    WORK.mkdir(parents=True, exist_ok=True)
    info, started = machine(), time.monotonic()
    loads = [replace(LOAD, concurrency=(c,)) for c in opts.concurrency]
    streaming = Streaming(min_gap_ms=opts.min_gap_ms, max_responses_per_s=opts.max_responses_per_s)
    done = measure(checkpoint, opts.rounds, extra, loads, streaming)
    data = json.loads(opts.out.read_text()) if opts.out.is_file() else {}
    for load, readings in zip(loads, done, strict=True):
        rec = {
            "what": opts.what,
            **record(info, readings, opts.rounds, extra, started, load, streaming),
        }
        key = opts.key if len(loads) == 1 else f"{opts.key}_c{load.concurrency[0]}"
        data.setdefault("runs", {})[key] = rec
        print(key, json.dumps({side: stream_figures(r) for side, r in readings.items()}))
        for row in rows(rec["sides"]):
            print(" | ".join(row.cells()))
    opts.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
