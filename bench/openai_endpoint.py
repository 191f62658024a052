"""The OpenAI-compatible endpoint's overhead over the gRPC path it is built on.

    TRITONFORGE_LLM_CHECKPOINT=/path/to/checkpoint python -m bench.openai_endpoint

One tritonserver with the zoo's LLM; the endpoint runs in its own process
(``python -m openai_frontend``, as in the container). The same prompt and 64 new tokens
(``ignore_eos``, temperature 0) go, alternately, through ``clients.AsyncGenerator`` over gRPC and
through the ``openai`` SDK's chat streaming: 20 streams one at a time (time to first token, total),
then 8 at once. Writes ``bench/results/openai.json``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai

from bench.common import machine, save
from builder.llm.serving import EngineArgs, ServingSettings
from builder.server import TritonServer, find_free_port
from builder.targets.vllm_python import write_local_model
from clients.generator import AsyncGenerator

MODEL = "smollm2"
NEW_TOKENS = 64
CHAT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
SEQUENTIAL = 20
CONCURRENT = 8
ENGINE = {"max_model_len": 1024, "max_num_seqs": 16, "kv_cache_space_gib": 1.0}
Stream = Callable[[], Awaitable[dict[str, float]]]


def grpc_stream(gen: AsyncGenerator) -> Stream:
    async def run() -> dict[str, float]:
        start, first, tokens = time.monotonic(), 0.0, 0
        async for piece in gen.stream_pieces(CHAT, max_tokens=NEW_TOKENS, ignore_eos=True):
            first = first or (time.monotonic() - start if piece.text else 0.0)
            tokens += piece.num_output_tokens
        return {"ttft": first, "total": time.monotonic() - start, "tokens": tokens}

    return run


def openai_stream(client: openai.AsyncOpenAI) -> Stream:
    async def run() -> dict[str, float]:
        start, first, tokens = time.monotonic(), 0.0, 0
        stream = await client.chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=NEW_TOKENS, temperature=0, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.monotonic() - start
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return {"ttft": first, "total": time.monotonic() - start, "tokens": tokens}

    return run


def summary(runs: list[dict[str, float]], wall: float | None = None) -> dict[str, Any]:
    ttft = [1000 * r["ttft"] for r in runs]
    total = [1000 * r["total"] for r in runs]
    out = {
        "requests": len(runs),
        "ttft_ms_p50": round(statistics.median(ttft), 1),
        "ttft_ms_mean": round(statistics.fmean(ttft), 1),
        "total_ms_p50": round(statistics.median(total), 1),
        "total_ms_mean": round(statistics.fmean(total), 1),
        "output_tokens": int(sum(r["tokens"] for r in runs)),
    }
    if wall is not None:
        out["output_tokens_per_s"] = round(out["output_tokens"] / wall, 1)
    return out


async def compare(grpc_url: str, openai_url: str) -> dict[str, Any]:
    async with AsyncGenerator(grpc_url, MODEL, timeout=600) as gen:
        client = openai.AsyncOpenAI(base_url=openai_url, api_key="none", max_retries=0, timeout=600)
        paths = {"grpc": grpc_stream(gen), "openai": openai_stream(client)}
        for run in paths.values():
            await run()  # warm-up
        one: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
        for _ in range(SEQUENTIAL):  # alternated, so that drift hits both alike
            for name, run in paths.items():
                one[name].append(await run())
        many: dict[str, dict[str, Any]] = {}
        for name, run in paths.items():
            start = time.monotonic()
            runs = await asyncio.gather(*[run() for _ in range(CONCURRENT)])
            many[name] = summary(list(runs), time.monotonic() - start)
        await client.close()
    sequential = {name: summary(runs) for name, runs in one.items()}
    g, o = sequential["grpc"], sequential["openai"]
    return {
        "sequential": sequential,
        "concurrent": many,
        "openai_overhead_ms": {
            "ttft_p50": round(o["ttft_ms_p50"] - g["ttft_ms_p50"], 1),
            "total_p50": round(o["total_ms_p50"] - g["total_ms_p50"], 1),
        },
    }


def start_endpoint(grpc_url: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "openai_frontend", "--triton", grpc_url, "--port", str(port)]
    proc = subprocess.Popen(cmd, env={**os.environ, "TRITONFORGE_OPENAI_API_KEY": ""})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the OpenAI endpoint exited") from None
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("the OpenAI endpoint did not start")


def main() -> int:
    checkpoint = os.environ.get("TRITONFORGE_LLM_CHECKPOINT")
    if not checkpoint:
        print("set TRITONFORGE_LLM_CHECKPOINT to a checkpoint folder", file=sys.stderr)
        return 2
    repo = Path(tempfile.mkdtemp(prefix="openai-bench-")) / "repo"
    engine = EngineArgs(model=str(Path(checkpoint).resolve()), dtype="float32", **ENGINE)  # type: ignore[arg-type]
    write_local_model(repo / MODEL, engine, ServingSettings(max_waiting=16))
    server = TritonServer(repo, log_path=repo.parent / "server.log")
    server.start(timeout=600)  # vLLM's engine: from 20 s to minutes on a busy machine
    try:
        port = find_free_port()
        endpoint = start_endpoint(server.grpc_url, port)
        try:
            result = asyncio.run(compare(server.grpc_url, f"http://127.0.0.1:{port}/v1"))
        finally:
            endpoint.terminate()
            endpoint.wait(10)
    finally:
        server.stop()
    data = {
        "machine": machine(),
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "engine": {**ENGINE, "dtype": "float32", "new_tokens": NEW_TOKENS, "ignore_eos": True},
        **result,
    }
    print(save("openai", data))
    print(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
