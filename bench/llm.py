"""LLM serving measured side by side in one run, same machine, prompts and output length
(64 new tokens, ``ignore_eos``, greedy), every side loaded by perf_analyzer's streaming mode
through the perf wrapper's LLM mode:

1. continuous batching: output tokens/s at concurrency 16 over concurrency 1, through Triton;
2. against vLLM's own OpenAI-compatible server on the same checkpoint and engine settings;
3. against the naive server: ``bench/naive_llm/model.py``, transformers ``generate`` one request
   at a time in a Python-backend model;
4. streaming: time to first token against the full-response latency at concurrency 1;
5. prefix caching: TTFT with a long shared system prompt, caching on and off;
6-7. short requests beside long jobs with and without a lane, and an overload burst
   (``bench/llm_contention.py``).

Every side runs the dtype the zoo's build chose on this machine (``dtype: auto``: the faster of
float32 and bfloat16 that verified), recorded with the build's reason; TRITONFORGE_LLM_DTYPE
overrides it.

    python -m bench.llm [sides prefix lanes overload]   (default: all)

TRITONFORGE_LLM_CHECKPOINT=FOLDER measures another checkpoint.

Needs vLLM in the running interpreter and the checkpoint; writes ``bench/results/llm.json``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import llm_contention as contention
from bench.common import cpu_flags, machine, save
from bench.vllm_server import VLLMServer, vllm_openai_server
from clients.perf.llm import LLMLoad, run_llm_perf
from clients.perf.llm_prompts import load_chats, shape
from clients.perf.llm_report import LLMReport

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WORK = RESULTS / "work" / "llm"
MODEL = "smollm2"
NEW_TOKENS = 64
ENGINE: dict[str, Any] = {
    "dtype": "float32", "max_model_len": 1024, "max_num_seqs": 16, "kv_cache_space_gib": 1.0,
    "enable_prefix_caching": True, "enforce_eager": True, "seed": 0,
}  # fmt: skip
LOAD = LLMLoad(output_tokens=NEW_TOKENS, concurrency=(1, 16), requests_per_user=2, min_requests=6)
PREFIX_LOAD = LLMLoad(output_tokens=8, concurrency=(1,), requests_per_user=10, min_requests=10)
NAIVE_LOAD = LLMLoad(output_tokens=NEW_TOKENS, concurrency=(16,), requests_per_user=1, min_requests=16)
START_TIMEOUT = 900
DTYPE_REASON: list[str] = []  # why ENGINE has its dtype (checkpoint() sets both)
ROUNDS = 4  # alternated, A B B A ...: one round of one side spreads by up to 10 % on 2 cores
KEYS = ("benchmark", "measured", "target", "met")


@contextlib.contextmanager
def triton(
    checkpoint: Path, naive: bool = False, settings: Any = None, tag: str = "", **overrides: Any
) -> Iterator[Any]:
    """tritonserver with the ``vllm_engine`` model (or the naive one) named ``smollm2``;
    ``settings``: its ServingSettings (default: 64 may wait); ``overrides``: engine settings
    changed from ``ENGINE``; ``tag`` names the work folder."""
    from builder.llm.serving import EngineArgs, ServingSettings
    from builder.server import TritonServer
    from builder.targets.vllm_python import write_local_model

    name = tag or "_".join(f"{k}-{v}" for k, v in overrides.items())
    root = WORK / ("naive" if naive else "triton") / name
    repo = root / "repo"
    if naive:
        write_naive_model(repo / MODEL, checkpoint)
    else:
        engine = EngineArgs(model=str(checkpoint.resolve()), **{**ENGINE, **overrides})
        write_local_model(repo / MODEL, engine, settings or ServingSettings(max_waiting=64))
    server = TritonServer(repo, log_path=root / "server.log")
    server.start(timeout=START_TIMEOUT)
    try:
        yield server
    finally:
        server.stop()


def write_naive_model(model_dir: Path, checkpoint: Path) -> None:
    import shutil

    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "bench" / "naive_llm" / "model.py", model_dir / "1" / "model.py")
    group = mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    cfg = mc.ModelConfig(name=MODEL, backend="python", max_batch_size=0, instance_group=[group])
    string, boolean = mc.DataType.Value("TYPE_STRING"), mc.DataType.Value("TYPE_BOOL")
    inputs = [("text_input", string), ("sampling_parameters", string), ("stream", boolean),
              ("exclude_input_in_output", boolean), ("return_num_output_tokens", boolean)]  # fmt: skip
    for name, dtype in inputs:
        cfg.input.append(mc.ModelInput(name=name, data_type=dtype, dims=[1], optional=True))
    cfg.output.append(mc.ModelOutput(name="text_output", data_type=string, dims=[-1]))
    cfg.output.append(
        mc.ModelOutput(name="num_output_tokens", data_type=mc.DataType.Value("TYPE_UINT32"), dims=[1])
    )
    cfg.parameters["checkpoint"].string_value = str(checkpoint.resolve())
    cfg.parameters["dtype"].string_value = str(ENGINE["dtype"])
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(cfg))


@contextlib.contextmanager
def vllm_openai(checkpoint: Path) -> Iterator[VLLMServer]:
    """``python -m vllm.entrypoints.openai.api_server`` with the engine settings Triton's model gets."""
    args = ["--model", str(checkpoint), "--served-model-name", MODEL, "--dtype", str(ENGINE["dtype"]),
            "--max-model-len", str(ENGINE["max_model_len"]), "--max-num-seqs", str(ENGINE["max_num_seqs"]),
            "--kv-cache-memory-bytes", str(int(float(ENGINE["kv_cache_space_gib"]) * 2**30)),
            "--enable-prefix-caching", "--enforce-eager", "--seed", "0"]  # fmt: skip
    with vllm_openai_server(args, WORK / "vllm_openai.log", START_TIMEOUT) as server:
        yield server


def shared_prefix_chats(chats: list[Any]) -> list[Any]:
    """Every chat behind one long system prompt (~600 tokens of the prompt set's own text)."""
    reference = "\n".join(f"- {chat[-1]['content']}" for chat in chats)
    system = "You answer questions like these, briefly and accurately:\n" + reference + "\n" + reference
    return [[{"role": "system", "content": system}, chat[-1]] for chat in chats]


def prefix_caching(checkpoint: Path) -> dict[str, Any]:
    """TTFT at concurrency 1 with the long shared system prompt, prefix caching on and off."""
    chats = shared_prefix_chats(load_chats(ROOT / "calibration" / MODEL / "perf.json"))
    prompts = shape(chats, checkpoint, None)[:10]
    out: dict[str, Any] = {"prompt_tokens": [p.tokens for p in prompts]}
    for on in (True, False):
        with triton(checkpoint, enable_prefix_caching=on) as server:
            folder = WORK / f"prefix_{'on' if on else 'off'}"
            report = run_llm_perf(server.grpc_url, MODEL, prompts, PREFIX_LOAD, out_dir=folder,
                                  metrics_url=server.metrics_url)  # fmt: skip
        out["on" if on else "off"] = point(report, 1)
    return out


def point(report: LLMReport, concurrency: int) -> dict[str, Any]:
    p = next(p for p in report.points if p.concurrency == concurrency)
    return {**asdict(p.client), "server": asdict(p.server) if p.server else None}


PARTS = ("sides", "prefix", "lanes", "overload")


def measure(checkpoint: Path, parts: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """``sides``: rows 1-4; ``prefix``: row 5; ``lanes``: row 6; ``overload``: row 7."""
    chats = load_chats(ROOT / "calibration" / MODEL / "perf.json")
    prompts = shape(chats, checkpoint, None)
    avg = [round(x, 2) for x in os.getloadavg()]
    out: dict[str, Any] = {"prompts": len(prompts), "prompt_tokens": [p.tokens for p in prompts],
                           f"load_avg_before_{'_'.join(parts)}": avg}  # fmt: skip
    if "sides" in parts:
        out.update(engine_sides(checkpoint, prompts))
        out["naive"] = naive_side(checkpoint, prompts)
    if "prefix" in parts:
        out["prefix_caching"] = prefix_caching(checkpoint)
    if "lanes" in parts:
        out["lanes"] = contention.lanes(triton, checkpoint, MODEL, chats, prompts, WORK / "lanes")
    if "overload" in parts:
        out["overload"] = contention.overload(triton, checkpoint, MODEL)
    return out


def engine_sides(checkpoint: Path, prompts: list[Any]) -> dict[str, Any]:
    """Triton and vLLM's own server up at once and measured in alternating rounds, so that a
    shared machine's changing load falls on both; each side keeps, per concurrency, its round
    with the most output tokens/s, and every round's tokens/s at 16 and TTFT p50 at 1 (row 2's
    ratios come from their sums)."""
    start = time.monotonic()
    with triton(checkpoint) as server, vllm_openai(checkpoint) as vllm:
        started = round(time.monotonic() - start, 1)
        runs: dict[str, list[LLMReport]] = {"triton": [], "vllm_openai": []}
        for r in range(ROUNDS):
            for name in ("triton", "vllm_openai") if r % 2 == 0 else ("vllm_openai", "triton"):
                folder = WORK / name / f"round{r + 1}"
                if name == "triton":
                    report = run_llm_perf(server.grpc_url, MODEL, prompts, LOAD, out_dir=folder,
                                          metrics_url=server.metrics_url)  # fmt: skip
                else:
                    report = run_llm_perf(vllm.url, MODEL, prompts, LOAD, out_dir=folder,
                                          service_kind="openai")  # fmt: skip
                runs[name].append(report)
    out: dict[str, Any] = {}
    for name, reports in runs.items():
        best = {c: best_point([point(rep, c) for rep in reports]) for c in LOAD.concurrency}
        out[name] = {"start_s": started, "rounds": ROUNDS, "load_avg_after": _load(),
                     "round_tps_c16": [point(rep, 16)["output_tokens_per_s"] for rep in reports],
                     "round_ttft_ms_c1": [streamed_ttft(point(rep, 1)) for rep in reports],
                     **{f"c{c}": p for c, p in best.items()}}  # fmt: skip
    print("engine sides: " + json.dumps({"start_s": started, "load_avg_after": _load()}), flush=True)
    return out


def naive_side(checkpoint: Path, prompts: list[Any]) -> dict[str, Any]:
    with triton(checkpoint, naive=True) as server:
        report = run_llm_perf(server.grpc_url, MODEL, prompts, NAIVE_LOAD, out_dir=WORK / "naive")
    return {"load_avg_after": _load(), **{f"c{c}": point(report, c) for c in NAIVE_LOAD.concurrency}}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rows(m: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(benchmark, measured, target, met) from one run's figures."""
    if not all(side in m for side in ("triton", "vllm_openai", "naive")):
        return [*prefix_rows(m.get("prefix_caching")), *contended_rows(m)]
    t1, t16 = m["triton"]["c1"], m["triton"]["c16"]
    v1, v16 = m["vllm_openai"]["c1"], m["vllm_openai"]["c16"]
    n16 = m["naive"]["c16"]
    gain = t16["output_tokens_per_s"] / t1["output_tokens_per_s"]
    vs_tps, tps_rounds = vs_rounds(m, "round_tps_c16", t16["output_tokens_per_s"], v16["output_tokens_per_s"])
    vs_ttft, ttft_rounds = vs_medians(m, "round_ttft_ms_c1", t1["ttft_ms_p50"], v1["ttft_ms_p50"])
    vs_naive = t16["output_tokens_per_s"] / n16["output_tokens_per_s"]
    tps = "output_tokens_per_s"
    return [
        ("1. continuous batching (Triton, c16 / c1)",
         f"{gain:.2f}x ({t16[tps]:.0f} / {t1[tps]:.0f} tokens/s)", ">= 5x", gain >= 5),
        ("2. vs vLLM's own server: tokens/s at c16",
         f"{vs_tps:.2f}x ({tps_rounds}best rounds {t16[tps]:.0f} / {v16[tps]:.0f} tokens/s)", ">= 1.0x",
         vs_tps >= 1.0),
        ("2. vs vLLM's own server: TTFT p50 at c1",
         f"{vs_ttft:.2f}x ({ttft_rounds}best rounds {t1['ttft_ms_p50']:.0f} / {v1['ttft_ms_p50']:.0f} ms)",
         "<= 1.1x", vs_ttft <= 1.1),
        ("3. vs naive transformers server: tokens/s at c16",
         f"{vs_naive:.2f}x ({t16[tps]:.0f} / {n16[tps]:.1f} tokens/s)", ">= 5x", vs_naive >= 5),
        ("4. streaming: TTFT vs full response at c1 (Triton)",
         f"TTFT p50 {t1['ttft_ms_p50']:.0f} ms vs full {t1['latency_ms_p50']:.0f} ms "
         f"({t1['latency_ms_p50'] / t1['ttft_ms_p50']:.1f}x sooner)", "recorded", None),
        *prefix_rows(m.get("prefix_caching")),
        *contended_rows(m),
    ]  # fmt: skip


def vs_rounds(m: dict[str, Any], key: str, best_triton: float, best_vllm: float) -> tuple[float, str]:
    """Triton over vLLM from the sums of their alternated rounds, and the rounds' spread to show;
    a record without the rounds (older runs) compares the best rounds."""
    t, v = m["triton"].get(key), m["vllm_openai"].get(key)
    if not t or not v or len(t) != len(v):
        return best_triton / best_vllm, ""
    ratios = [a / b for a, b in zip(t, v, strict=True)]
    return sum(t) / sum(v), f"{len(t)} rounds' sums, rounds {min(ratios):.2f}-{max(ratios):.2f}; "


def best_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the most output tokens/s among those whose responses all streamed to the
    client (all rounds where none did)."""
    streamed = [p for p in points if not p.get("bunched_requests")] or points
    return max(streamed, key=lambda p: p["output_tokens_per_s"])


def streamed_ttft(p: dict[str, Any]) -> float | None:
    """A round's TTFT p50, or None where the client took some requests' responses in one bunch
    (``bunched_requests``): then its timestamps are not the server's."""
    return None if p.get("bunched_requests") else p["ttft_ms_p50"]


def vs_medians(m: dict[str, Any], key: str, best_triton: float, best_vllm: float) -> tuple[float, str]:
    """Triton over vLLM from the medians of the rounds whose responses streamed (older records
    without the rounds compare the best rounds)."""
    t, v = m["triton"].get(key), m["vllm_openai"].get(key)
    if not t or not v:
        return best_triton / best_vllm, ""
    kept_t, kept_v = [x for x in t if x is not None], [x for x in v if x is not None]
    if not kept_t or not kept_v:
        return math.nan, "no round streamed; "
    left = len(t) + len(v) - len(kept_t) - len(kept_v)
    note = f", {left} bunched round(s) left out" if left else ""
    return statistics.median(kept_t) / statistics.median(kept_v), f"medians of {len(t)} rounds{note}; "


def contended_rows(m: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    return [*contention.lanes_rows(m.get("lanes")), *contention.overload_rows(m.get("overload"))]


def prefix_rows(m: dict[str, Any] | None) -> list[tuple[str, str, str, bool | None]]:
    if not m:
        return []
    on, off = m["on"]["ttft_ms_p50"], m["off"]["ttft_ms_p50"]
    tokens = sum(m["prompt_tokens"]) / len(m["prompt_tokens"])
    return [(f"5. prefix caching: TTFT p50 at c1, ~{tokens:.0f}-token prompts sharing a system prompt",
             f"on {on:.0f} ms / off {off:.0f} ms ({off / on:.2f}x)", "recorded", None)]  # fmt: skip


def skipped() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not importable in this interpreter"
    folder = os.environ.get("TRITONFORGE_LLM_CHECKPOINT")
    if folder and not (Path(folder) / "config.json").is_file():
        return f"TRITONFORGE_LLM_CHECKPOINT={folder} has no config.json"
    return None


def checkpoint() -> Path:
    """TRITONFORGE_LLM_CHECKPOINT, else the zoo LLM's checkpoint as the build makes it (stage cache);
    ENGINE's dtype becomes the one that build serves (TRITONFORGE_LLM_DTYPE, if set, wins)."""
    folder = os.environ.get("TRITONFORGE_LLM_CHECKPOINT")
    if folder:
        found, dtype, why = Path(folder), "float32", "TRITONFORGE_LLM_CHECKPOINT: float32"
    else:
        found, dtype, why = built_llm()
    ENGINE["dtype"] = os.environ.get("TRITONFORGE_LLM_DTYPE") or dtype
    DTYPE_REASON[:] = ["TRITONFORGE_LLM_DTYPE" if os.environ.get("TRITONFORGE_LLM_DTYPE") else why]
    return found


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def built_llm() -> tuple[Path, str, str]:
    """The zoo LLM's checkpoint, served dtype and the build's reason for it (stage cache)."""
    from builder.cache import StageCache
    from builder.llm.build import build_llm
    from builder.records import BuildContext
    from builder.spec import load_spec

    spec_file = ROOT / "models.yaml"
    spec = load_spec(spec_file)
    llm = next((m for m in spec.llms if m.name == MODEL), None)
    assert llm is not None, f"models.yaml has no LLM named {MODEL}"
    cache = StageCache(ROOT / ".tritonforge" / "cache", _stderr)
    done = build_llm(llm, BuildContext(spec, spec_file, ROOT, cache, _stderr))
    verdict = done.verdict
    return done.checkpoint, verdict.dtype.value, verdict.choice or f"models.yaml: dtype {verdict.dtype.value}"


def record(m: dict[str, Any] | None, reason: str | None = None) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu_flags": cpu_flags(),
            "cores": os.cpu_count(),
            "engine": ENGINE, "dtype_reason": DTYPE_REASON[0] if DTYPE_REASON else None,
            "new_tokens": NEW_TOKENS, "ignore_eos": True, "skipped": reason,
            "rows": [dict(zip(KEYS, r, strict=True)) for r in rows(m)] if m else [],
            "results": m}  # fmt: skip


def run(opts: Any) -> tuple[dict[str, Any], list[Any]]:
    """bench.run's entry: the figures and the summary rows (one 'skipped' row without vLLM)."""
    from bench.common import Row

    reason = skipped()
    m = None if reason else measure(checkpoint())
    data = record(m, reason)
    if reason:
        return data, [Row("LLM serving", f"skipped: {reason}", "-", None)]
    return data, [Row(*r) for r in rows(m)]  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.llm [PART ...]`` (default all); a subset updates those parts of llm.json."""
    parts = tuple(sys.argv[1:] if argv is None else argv) or PARTS
    if set(parts) - set(PARTS):
        print(f"parts: choose from {', '.join(PARTS)}", file=sys.stderr)
        return 2
    reason = skipped()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    start, info = time.perf_counter(), machine()
    m = measure(checkpoint(), parts)
    earlier = RESULTS / "llm.json"
    if set(parts) != set(PARTS) and earlier.is_file():
        m = {**measured(json.loads(earlier.read_text())), **m}
    data = record(m)
    save("llm", {"machine": info, "quick": False, "seconds": time.perf_counter() - start,
                 "rows": data["rows"], "results": data})  # fmt: skip
    for r in data["rows"]:
        print(" | ".join(str(v) for v in r.values()))
    return 0


def measured(saved: dict[str, Any]) -> dict[str, Any]:
    """The measurements in an llm.json as bench.run saves it (``results`` holds the record)."""
    inner = saved.get("results") or {}
    found = inner.get("results") if "machine" in saved else inner
    return dict(found or {})


if __name__ == "__main__":
    sys.exit(main())
