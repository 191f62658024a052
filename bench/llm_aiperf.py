"""NVIDIA's aiperf as the cross-check of the LLM rows' own figures, in one run, same checkpoint,
prompts and load: 64 new tokens (``ignore_eos``, greedy), 16 requests one at a time, 16 from 4
streams and 64 from 16 streams. Beside each tool's figures over the other's, aiperf's figures of
the project's OpenAI endpoint over vLLM's own server at each concurrency (tokens/s, TTFT and ITL
p50), the target being tokens/s at 4 streams at least TARGET_TPS_C4 of vLLM's.

* **tritonforge**: one tritonserver with the ``vllm_engine`` model; the project's own code
  (``clients.perf.run_llm_perf``, perf_analyzer's gRPC stream, as `make bench`'s LLM rows) and
  aiperf through the project's OpenAI endpoint (``python -m openai_frontend``, as
  ``tritonforge serve --openai-port`` runs it) on the same server;
* **vllm**: vLLM's own OpenAI server, measured by both tools on its ``/v1/completions``.

Both tools send the same rendered prompts to completions, with the same sampling. aiperf lives in
its own virtualenv, ``.tools/aiperf-venv`` (created with ``aiperf==AIPERF_VERSION`` from PyPI on
first use): its pins clash with the project's. Writes ``bench/results/llm_aiperf.json``.

    python -m bench.run --only llm_aiperf
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import llm
from bench.common import Row
from clients.perf.llm import LLMLoad, run_llm_perf
from clients.perf.llm_prompts import Prompt, load_chats, shape

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "results" / "work" / "llm_aiperf"
AIPERF_VERSION = "0.13.0"
VENV = ROOT / ".tools" / "aiperf-venv"
EXPORT = "profile_export_aiperf.json"
LOAD = LLMLoad(output_tokens=64, concurrency=(1, 4, 16), requests_per_user=4, min_requests=16)
TARGET_TPS_C4 = 0.95  # aiperf's output tokens/s at 4 streams, the project's endpoint / vLLM's server
AIPERF_TIMEOUT_S = 900.0
CONC = LOAD.concurrency
SIDES = ("tritonforge", "vllm")
TOOLS = ("own", "aiperf")


class AiperfError(RuntimeError):
    """aiperf could not be installed or run, or its export lacks a figure."""


@dataclass(frozen=True)
class Figures:
    """One tool's figures at one concurrency (milliseconds, tokens per second)."""

    concurrency: int
    requests: int
    ttft_ms_p50: float
    itl_ms_p50: float
    output_tokens_per_s: float
    output_tokens_mean: float


# ---------------------------------------------------------------- aiperf's export


def _metric(data: Mapping[str, Any], where: Path, name: str, stat: str) -> float:
    value = (data.get(name) or {}).get(stat)
    if not isinstance(value, int | float):
        raise AiperfError(f"{where}: no '{name}.{stat}' in aiperf's export")
    return float(value)


def parse_export(path: Path) -> Figures:
    """Figures from aiperf's ``profile_export_aiperf.json``: TTFT p50, its per-request inter-token
    latency p50 (decode time / (tokens - 1)), output tokens/s over the whole run."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AiperfError(f"{path}: cannot read aiperf's export ({exc})") from exc
    errors = data.get("error_summary") or []
    if errors:
        raise AiperfError(f"{path}: aiperf recorded failed requests: {json.dumps(errors)[:300]}")
    phases = (data.get("input_config") or {}).get("phases") or []
    profiling = next((p for p in phases if p.get("kind") == "profiling"), None)
    if not profiling or not isinstance(profiling.get("concurrency"), int):
        raise AiperfError(f"{path}: no profiling phase with a concurrency in 'input_config'")
    return Figures(
        concurrency=profiling["concurrency"],
        requests=int(_metric(data, path, "request_count", "avg")),
        ttft_ms_p50=_metric(data, path, "time_to_first_token", "p50"),
        itl_ms_p50=_metric(data, path, "inter_token_latency", "p50"),
        output_tokens_per_s=_metric(data, path, "output_token_throughput", "avg"),
        output_tokens_mean=_metric(data, path, "output_sequence_length", "avg"),
    )


def own_figures(point: Mapping[str, Any]) -> Figures:
    """The project's own figures of one load point (``bench.llm.point``)."""
    return Figures(
        concurrency=int(point["concurrency"]),
        requests=int(point["requests"]),
        ttft_ms_p50=float(point["ttft_ms_p50"]),
        itl_ms_p50=float(point["itl_ms_p50"]),
        output_tokens_per_s=float(point["output_tokens_per_s"]),
        output_tokens_mean=point["output_tokens"] / point["requests"],
    )


# ---------------------------------------------------------------- running aiperf


def aiperf_bin() -> Path:
    """``.tools/aiperf-venv/bin/aiperf``, the venv created and aiperf installed on first use."""
    exe, python = VENV / "bin" / "aiperf", VENV / "bin" / "python"
    if exe.is_file() and installed_version(python) == AIPERF_VERSION:
        return exe
    steps = [[sys.executable, "-m", "venv", str(VENV)]] if not python.is_file() else []
    steps.append([str(python), "-m", "pip", "install", "--quiet", f"aiperf=={AIPERF_VERSION}"])
    for cmd in steps:
        print("aiperf: " + " ".join(cmd), flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            raise AiperfError(f"installing aiperf=={AIPERF_VERSION} failed: {' '.join(cmd)}\n{tail}")
    return exe


def installed_version(python: Path) -> str | None:
    probe = "import importlib.metadata as m; print(m.version('aiperf'))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def write_prompts(prompts: Sequence[Prompt], path: Path) -> Path:
    """aiperf's ``single_turn`` dataset: the rendered prompts the project's own load sends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": p.text}) + "\n" for p in prompts))
    return path


def aiperf_command(
    exe: Path, url: str, tokenizer: Path, dataset: Path, concurrency: int, out_dir: Path
) -> list[str]:
    """One streamed completions run: fixed request count, the same sampling as the own load, token
    counts from the server's usage (the tokenizer is a local folder: aiperf reads no hub)."""
    return [
        str(exe), "profile", "--model", llm.MODEL, "--url", f"http://{url}",
        "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tokenizer),
        "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
        "--extra-inputs", f"max_tokens:{LOAD.output_tokens}", "--extra-inputs", "ignore_eos:true",
        "--extra-inputs", "temperature:0", "--use-server-token-count",
        "--concurrency", str(concurrency), "--request-count", str(LOAD.requests(concurrency)),
        "--random-seed", "0", "--artifact-dir", str(out_dir), "--ui-type", "none",
        "--no-server-metrics", "--no-gpu-telemetry", "--export-level", "summary",
    ]  # fmt: skip


def run_aiperf(cmd: list[str], out_dir: Path) -> Figures:
    # aiperf 0.13 with HF_HUB_OFFLINE set looks a local tokenizer folder up as a hub repo id.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=AIPERF_TIMEOUT_S, env=env,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise AiperfError(f"aiperf did not finish within {AIPERF_TIMEOUT_S:g} s") from exc
    (out_dir / "aiperf.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        raise AiperfError(f"aiperf failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
    return parse_export(out_dir / EXPORT)


# ---------------------------------------------------------------- the two sides


def measure(checkpoint: Path) -> dict[str, Any]:
    """Both servers up at once; each measured by both tools at 1, 4 and 16 streams (tritonforge: own
    tool first; vllm: aiperf first, so that neither tool always meets a fresh server)."""
    from bench.openai_endpoint import start_endpoint
    from builder.server import find_free_port

    exe = aiperf_bin()
    prompts = shape(load_chats(ROOT / "calibration" / llm.MODEL / "perf.json"), checkpoint, None)
    dataset = write_prompts(prompts, WORK / "prompts.jsonl")
    out: dict[str, Any] = {"prompts": len(prompts), "prompt_tokens": [p.tokens for p in prompts],
                           "load_avg_before": _load()}  # fmt: skip
    start = time.monotonic()
    with llm.triton(checkpoint, tag="aiperf") as server, llm.vllm_openai(checkpoint) as vllm:
        port = find_free_port()
        endpoint = start_endpoint(server.grpc_url, port)
        out["start_s"] = round(time.monotonic() - start, 1)
        try:
            urls = {"tritonforge": (server.grpc_url, f"127.0.0.1:{port}"), "vllm": (vllm.url, vllm.url)}
            for side in SIDES:
                for tool in TOOLS if side == "tritonforge" else TOOLS[::-1]:
                    own_url, openai_url = urls[side]
                    got = (
                        own_points(own_url, side, prompts)
                        if tool == "own"
                        else [aiperf_point(exe, openai_url, checkpoint, dataset, side, c) for c in CONC]
                    )
                    out.setdefault(side, {})[tool] = {f"c{f.concurrency}": asdict(f) for f in got}
                    print(f"{side} {tool}: " + json.dumps(out[side][tool]), flush=True)
        finally:
            endpoint.terminate()
            endpoint.wait(10)
    out["load_avg_after"] = _load()
    return out


def own_points(url: str, side: str, prompts: list[Prompt]) -> list[Figures]:
    """The project's own load: perf_analyzer's gRPC stream on Triton, its OpenAI client on vLLM."""
    kind = "triton" if side == "tritonforge" else "openai"
    report = run_llm_perf(url, llm.MODEL, prompts, LOAD, out_dir=WORK / side / "own", service_kind=kind)
    return [own_figures({**llm.point(report, c), "concurrency": c}) for c in LOAD.concurrency]


def aiperf_point(
    exe: Path, url: str, checkpoint: Path, dataset: Path, side: str, concurrency: int
) -> Figures:
    folder = WORK / side / "aiperf" / f"c{concurrency}"
    folder.mkdir(parents=True, exist_ok=True)
    return run_aiperf(aiperf_command(exe, url, checkpoint, dataset, concurrency, folder), folder)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------- rows


def ratio(m: Mapping[str, Any], side: str, key: str, concurrency: int) -> float:
    """aiperf's figure over the project's own on one side."""
    point = f"c{concurrency}"
    return float(m[side]["aiperf"][point][key]) / float(m[side]["own"][point][key])


def versus_vllm(m: Mapping[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """aiperf's figures of the project's endpoint over vLLM's server, at each concurrency both have:
    output tokens/s (the target at 4 streams), TTFT p50 and ITL p50."""
    ours, theirs = m["tritonforge"]["aiperf"], m["vllm"]["aiperf"]
    out: list[tuple[str, str, str, bool | None]] = []
    for point in (p for p in ours if p in theirs):
        o, v = ours[point], theirs[point]
        tps = o["output_tokens_per_s"] / v["output_tokens_per_s"]
        ttft, itl = o["ttft_ms_p50"] / v["ttft_ms_p50"], o["itl_ms_p50"] / v["itl_ms_p50"]
        aimed = o["concurrency"] == 4
        out.append((
            f"aiperf at {point}: tritonforge's OpenAI endpoint / vLLM's own server",
            f"tokens/s {tps:.2f}x ({o['output_tokens_per_s']:.0f} / {v['output_tokens_per_s']:.0f}), "
            f"TTFT p50 {ttft:.2f}x ({o['ttft_ms_p50']:.0f} / {v['ttft_ms_p50']:.0f} ms), "
            f"ITL p50 {itl:.2f}x ({o['itl_ms_p50']:.1f} / {v['itl_ms_p50']:.1f} ms)",
            f"tokens/s >= {TARGET_TPS_C4:g}x" if aimed else "recorded",
            tps >= TARGET_TPS_C4 if aimed else None,
        ))  # fmt: skip
    return out


def rows(m: Mapping[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """Per side, aiperf's figures beside the project's own: tokens/s at 16 streams, TTFT p50 at 1;
    then the project's endpoint beside vLLM's server, by aiperf (``versus_vllm``)."""
    out: list[tuple[str, str, str, bool | None]] = []
    for side in SIDES:
        own, aip = m[side]["own"], m[side]["aiperf"]
        tps = ratio(m, side, "output_tokens_per_s", 16)
        ttft = ratio(m, side, "ttft_ms_p50", 1)
        out.append((
            f"aiperf cross-check ({side}): tokens/s at c16, aiperf / own",
            f"{tps:.2f}x ({aip['c16']['output_tokens_per_s']:.0f} / {own['c16']['output_tokens_per_s']:.0f})",
            "recorded", None,
        ))  # fmt: skip
        out.append((
            f"aiperf cross-check ({side}): TTFT p50 at c1, aiperf / own",
            f"{ttft:.2f}x ({aip['c1']['ttft_ms_p50']:.0f} / {own['c1']['ttft_ms_p50']:.0f} ms)",
            "recorded", None,
        ))  # fmt: skip
    return out + versus_vllm(m)


def record(m: Mapping[str, Any] | None, reason: str | None) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "aiperf": AIPERF_VERSION,
            "engine": llm.ENGINE, "dtype_reason": llm.DTYPE_REASON[0] if llm.DTYPE_REASON else None,
            "load": asdict(LOAD), "ignore_eos": True, "skipped": reason, "results": m}  # fmt: skip


def run(opts: Any) -> tuple[dict[str, Any], list[Row]]:
    """bench.run's entry: the figures and the summary rows (one 'skipped' row without vLLM)."""
    reason = llm.skipped()
    if reason:
        return record(None, reason), [Row("aiperf cross-check", f"skipped: {reason}", "-", None)]
    m = measure(llm.checkpoint())
    return record(m, None), [Row(*r) for r in rows(m)]
