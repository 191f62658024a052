"""LLM serving through tritonserver's ``vllm_engine`` model: output tokens/s at 1 and 16 streams,
time to first token, engine start time and the resident memory of server + stub + engine.

    TRITONFORGE_LLM_CHECKPOINT=/path/to/checkpoint python -m bench.llm_serving [bfloat16:auto float32 ...]

Runs in an interpreter that has vLLM (the server's Python stub uses the same environment).
Every request: 64 new tokens, ``ignore_eos``, temperature 0, over gRPC streaming.
Writes ``bench/results/llm_serving.json``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, save
from builder.estimate.rss import tree_rss
from builder.llm.serving import EngineArgs, ServingSettings
from builder.server import TritonServer
from builder.targets.vllm_python import write_local_model
from clients.generator import AsyncGenerator

MODEL = "smollm2"
NEW_TOKENS = 64
PROMPT = "Write a short story about a lighthouse keeper."
ENGINE = {"max_model_len": 1024, "max_num_seqs": 16, "kv_cache_space_gib": 1.0}


async def one_stream(gen: AsyncGenerator) -> dict[str, float]:
    """Time to first piece, end time and output tokens of one streamed request."""
    start = time.monotonic()
    first, tokens = 0.0, 0
    async for piece in gen.stream_pieces(PROMPT, max_tokens=NEW_TOKENS, ignore_eos=True):
        first = first or time.monotonic() - start
        tokens += piece.num_output_tokens
    return {"ttft": first, "total": time.monotonic() - start, "tokens": tokens}


async def concurrent(url: str, streams: int, rounds: int) -> dict[str, Any]:
    async with AsyncGenerator(url, MODEL, timeout=600) as gen:
        await one_stream(gen)  # warm-up
        runs, walls = [], []
        for _ in range(rounds):
            start = time.monotonic()
            runs += await asyncio.gather(*[one_stream(gen) for _ in range(streams)])
            walls.append(time.monotonic() - start)
    tokens = sum(r["tokens"] for r in runs)
    ttfts = sorted(r["ttft"] for r in runs)
    return {
        "streams": streams,
        "requests": len(runs),
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / sum(walls), 1),
        "ttft_ms_p50": round(1000 * statistics.median(ttfts), 1),
        "ttft_ms_max": round(1000 * ttfts[-1], 1),
    }


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (server, stub, engine core, worker)."""
    return round(sum(tree_rss(pid)) / 2**20, 1)


def measure(checkpoint: str, dtype: str, bind: str) -> dict[str, Any]:
    """One server with the engine's OpenMP threads bound as ``bind`` (vLLM's ``auto``: all cores
    but one, which it leaves to the frontend), measured at 1 and 16 streams."""
    repo = Path(tempfile.mkdtemp(prefix="llm-bench-")) / "repo"
    engine = EngineArgs(model=str(Path(checkpoint).resolve()), dtype=dtype, **ENGINE)  # type: ignore[arg-type]
    write_local_model(repo / MODEL, engine, ServingSettings(max_waiting=16))
    env = {} if bind == "auto" else {"VLLM_CPU_OMP_THREADS_BIND": bind}
    server = TritonServer(repo, log_path=repo.parent / "server.log", env=env)
    start = time.monotonic()
    server.start(timeout=600)
    started_s = time.monotonic() - start
    try:
        idle_rss = tree_rss_mib(server.pid or 0)
        one = asyncio.run(concurrent(server.grpc_url, 1, rounds=5))
        sixteen = asyncio.run(concurrent(server.grpc_url, 16, rounds=2))
        loaded_rss = tree_rss_mib(server.pid or 0)
    finally:
        server.stop()
    return {
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "server_start_s": round(started_s, 1),
        "one_stream": one,
        "sixteen_streams": sixteen,
        "batching_gain": round(sixteen["output_tokens_per_s"] / one["output_tokens_per_s"], 2),
        "rss_mib_idle": idle_rss,
        "rss_mib_after_load": loaded_rss,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.llm_serving [RUN ...]``, RUN = DTYPE[:OMP_BIND] (default bfloat16:auto)."""
    checkpoint = os.environ.get("TRITONFORGE_LLM_CHECKPOINT")
    if not checkpoint:
        print("set TRITONFORGE_LLM_CHECKPOINT to a checkpoint folder", file=sys.stderr)
        return 2
    runs = (sys.argv[1:] if argv is None else argv) or ["bfloat16:auto"]
    result: dict[str, Any] = {
        "machine": machine(),
        "engine": {**ENGINE, "enforce_eager": True, "new_tokens": NEW_TOKENS, "ignore_eos": True},
        "runs": {},
    }
    for run in runs:
        dtype, _, bind = run.partition(":")
        result["runs"][f"dtype={dtype} omp_bind={bind or 'auto'}"] = measure(
            checkpoint, dtype, bind or "auto"
        )
    print(save("llm_serving", result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
