"""6. CPU runtimes: each zoo core model as served (the fastest variant that verified, on whichever
runtime won) at concurrency 1 and 8, beside the variant ONNX Runtime serves it as (what the zoo
served before runtimes were a choice: its fastest ONNX Runtime variant among the spec's choices),
and beside in-process ONNX Runtime and in-process OpenVINO on the same graphs, opened by the
served model's own runtime modules (``onnx_runner/runtimes``) with the served config's parameters,
so in process runs what the server runs, with its threads.

In process, concurrency 1 is one caller at batch 1; concurrency 8 is one caller per instance of
the served config, each at batch 8 / instances (what the dynamic batcher forms at best), or 1 for
a variant that runs each request alone. Each in-process figure is timed right before and right
after its model's served sweeps (the larger counts). The served model's concurrency-1 p50 is also
taken through the project's own client (`clients.Client`), as an application calls it. Each model
has a server of its own that loads its two served models only. The physical limit is the graph's
FLOPs per call against the CPU's peak for the precision the served variant computes in
(bench/flops.py).

    .venv/bin/python -m bench.run --only cpu_runtimes
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.common import (
    WORK,
    Options,
    Row,
    Workload,
    build_repo,
    cpu_flags,
    cpu_seconds,
    cpu_use,
    minilm_feed,
    resnet_feed,
    serving,
    sweep,
    workload,
    zoo_models,
)
from bench.flops import Peak, clock_ghz, model_flops, peak, variant_precision
from builder.python_models.onnx_runner.utils.timings import TIMINGS_ENV
from builder.spec import Variant
from clients import Client

NAME = "cpu_runtimes"
MODELS = ("resnet18", "efficientnet_lite0", "minilm_encoder")
FEEDS: dict[str, Callable[[int], dict[str, NDArray[Any]]]] = {
    "resnet18": resnet_feed, "efficientnet_lite0": resnet_feed, "minilm_encoder": minilm_feed,
}  # fmt: skip
CONCURRENCY = (1, 8)
RUNTIMES = ("onnxruntime", "openvino")
TARGET_VS_ORT = {"resnet18": 3.0}  # served / ONNX-Runtime-served throughput; others: not slower
# Served against the fastest verified runtime in process with every core (one session): at
# concurrency 1 at most this much later (the Python backend's IPC and the gRPC copy of a request
# cost about 1-1.5 ms here, FACTS.md), at concurrency 8 at least this share of its best batch.
TARGET_C1_EXTRA_MS = 1.2
TARGET_C8_SHARE = 0.7
BATCHES = (1, 4, 8, 16, 32)  # the batch sizes the in-process best batch is taken over


@dataclass(frozen=True)
class Published:
    """One published model folder of the scratch repository and the variant run on its graph: the
    folder's own, or one it is not published as (``params``: its precision and runtime)."""

    name: str
    variant: str
    runtime: str
    folder: Path
    params: dict[str, str] = field(default_factory=dict)

    @property
    def onnx(self) -> Path:
        return self.folder / "1" / "model.onnx"

    def config(self) -> dict[str, Any]:
        """The config as the Python backend hands it to the model (JSON field names)."""
        from google.protobuf import json_format, text_format
        from tritonclient.grpc.model_config_pb2 import ModelConfig

        parsed = text_format.Parse((self.folder / "config.pbtxt").read_text(), ModelConfig())
        config = dict(json_format.MessageToDict(parsed, preserving_proto_field_name=True))
        if self.params:
            parameters = config.setdefault("parameters", {})
            parameters.update({k: {"string_value": v} for k, v in self.params.items()})
        return config

    def record(self) -> dict[str, Any]:
        return {"model": self.name, "variant": self.variant, "runtime": self.runtime}


# ---------------------------------------------------------------- which variants


def allowed(spec: dict[str, Any], variant: str) -> bool:
    """Whether the spec's ``targets.local.serve`` choices (none: all) allow the variant's precision."""

    choices = ((spec.get("targets") or {}).get("local") or {}).get("serve")
    if not choices:
        return True
    wanted = [choices] if isinstance(choices, str) else list(choices)
    return Variant.parse(variant).precision.value in wanted


def fastest_on(entry: dict[str, Any], spec: dict[str, Any], runtime: str) -> str | None:
    """The variant on ``runtime`` the build timed fastest among those that verified, have their
    graph in the repository and the spec allows the model's name to serve."""
    timed = {
        v: r["ms_per_sample"] for v, r in entry["verification"].items()
        if r["passed"] and r["runtime"] == runtime and r["ms_per_sample"] is not None
        and graph_of(entry, v) is not None and allowed(spec, v)
    }  # fmt: skip
    return min(timed, key=lambda v: timed[v]) if timed else None


def graph_of(entry: dict[str, Any], variant: str) -> str | None:
    """The published model whose graph ``variant`` runs: its own, or, for a variant the target does
    not publish (the local target publishes only ONNX Runtime's beside the served one), one
    published on the graph of its precision (bf16 runs the FP32 graph); None if there is none."""

    names = {v: n for n, v in entry["published"].items()}
    if variant in names:
        return names[variant]
    graph = Variant.parse(variant).precision.graph
    return next((n for v, n in names.items() if Variant.parse(v).precision.graph is graph), None)


def published(repo: Path, model: str, variant: str, entry: dict[str, Any]) -> Published:
    from builder.python_models.shared.runtimes import PRECISION, RUNTIME

    name = graph_of(entry, variant)
    assert name is not None
    runtime = entry["verification"][variant]["runtime"]
    own = entry["published"][name] == variant
    params = {} if own else {PRECISION: Variant.parse(variant).precision.value, RUNTIME: runtime}
    return Published(name, variant, runtime, repo / name, params)


def sides(repo: Path, model: str, spec: dict[str, Any]) -> dict[str, Published | None]:
    """The served model, each runtime's fastest variant (in process) and the ONNX Runtime one served."""
    entry = json.loads((repo / "manifest.json").read_text())["models"][model]
    out: dict[str, Published | None] = {"served": published(repo, model, entry["served"], entry)}
    for runtime in RUNTIMES:
        variant = fastest_on(entry, spec, runtime)
        out[runtime] = published(repo, model, variant, entry) if variant else None
    return out


# ---------------------------------------------------------------- in process


def open_sessions(side: Published, count: int) -> list[Any]:
    """``count`` sessions of the folder's graph, opened as the served model opens its own."""
    from builder.python_models.shared.runtimes import open_served

    config = side.config()
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    return [open_served(side.onnx, params, config) for _ in range(count)]


def instances(config: dict[str, Any]) -> int:
    return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1


def drive(sessions: Sequence[Any], feed: dict[str, NDArray[Any]], seconds: float) -> float:
    """Inferences per second with each session called back to back by a thread of its own: the
    build's sizing measurement (``builder.stages.size.rows_per_s``) over ``seconds``."""
    from builder.stages.size import rows_per_s

    return rows_per_s(sessions, feed, next(iter(feed.values())).shape[0], seconds=seconds, min_calls=3)


def in_process(
    side: Published, feed: Callable[[int], dict[str, NDArray[Any]]], seconds: float
) -> dict[str, float]:
    """Inferences per second at concurrency 1 and 8, as defined in the module's docstring."""
    config = side.config()
    count = instances(config)
    alone = config.get("parameters", {}).get("run_alone", {}).get("string_value") == "1"
    sessions = open_sessions(side, count)
    batch = 1 if alone else max(1, 8 // count)
    return {"1": drive(sessions[:1], feed(1), seconds), "8": drive(sessions, feed(batch), seconds)}


def at_every_core(
    side: Published, feed: Callable[[int], dict[str, NDArray[Any]]], seconds: float, max_batch: int
) -> dict[str, Any]:
    """One session of the side's graph with every core (its runtime's parameters, threads set to
    the cores): a lone request's latency in ms, and the most inferences per second over BATCHES."""
    from builder.python_models.shared.runtimes import runtime
    from builder.python_models.shared.runtimes.base import INTRA_OP_THREADS

    config = side.config()
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()} | side.params
    params[INTRA_OP_THREADS] = str(os.cpu_count() or 1)
    session = runtime(side.runtime).open(side.onnx, params.get("precision", "fp32"), params)
    rates = {b: drive([session], feed(b), seconds) for b in BATCHES if b <= max(max_batch, 1)}
    best = max(rates, key=lambda b: rates[b])
    measured = {"c1_ms": 1000 / rates[1], "best_batch": best, "best_rate": rates[best]}
    return {
        **side.record(),
        "threads": os.cpu_count() or 1,
        **measured,
        "rates": {str(b): r for b, r in rates.items()},
    }


def served_at(repo: Path, model: str) -> dict[str, Any]:
    """The sizing the build served the model at (the manifest's ``served_at``)."""
    return dict(json.loads((repo / "manifest.json").read_text())["models"][model].get("served_at") or {})


# ---------------------------------------------------------------- one model


def measure_model(repo: Path, model: str, spec: dict[str, Any], opts: Options) -> dict[str, Any]:
    chosen = sides(repo, model, spec)
    served = chosen["served"]
    assert served is not None
    ort = chosen["onnxruntime"] or served
    seconds = 1.0 if opts.quick else 2.0
    local = {r: p for r, p in chosen.items() if r in RUNTIMES and p is not None}
    local["served"] = served  # the served variant at the served sizing, in process
    before = {r: in_process(p, FEEDS[model], seconds) for r, p in local.items()}
    max_batch = int(spec.get("max_batch_size", 0))
    every_core = {
        r: at_every_core(p, FEEDS[model], seconds, max_batch) for r, p in local.items() if r != "served"
    }
    loaded = sorted({served.name, ort.name})
    timings = WORK / f"{NAME}_timings" / model
    shutil.rmtree(timings, ignore_errors=True)
    env = {TIMINGS_ENV: str(timings)}
    with serving(repo, f"{NAME}_{model}", model_control="explicit", load_models=loaded, env=env) as server:
        points = {p.name: served_points(server, repo, p, spec, opts, before) for p in (served, ort)}
        calls = 40 if opts.quick else 200
        client_c1 = project_client_c1(server.grpc_url, served.name, FEEDS[model](1), calls)
    after = {r: in_process(p, FEEDS[model], seconds) for r, p in local.items()}
    record = summarise(model, chosen, points, before, after)
    for key, side in (("served", served), ("ort_served", ort)):
        record[key]["runner_ms"] = runner_times(timings, side.name)
    record["served"]["served_at"] = served_at(repo, model)
    record["served"]["client_c1_ms"] = client_c1
    record["every_core"] = every_core
    record["sized"] = sized(record)
    return record


def project_client_c1(url: str, model: str, feed: dict[str, NDArray[Any]], calls: int) -> dict[str, float]:
    """The served model at concurrency 1 as the project's own client calls it (`clients.Client`,
    one request after another, the same batch-1 input as perf_analyzer's): p50 and p90 in ms."""
    with Client(url) as client:
        for _ in range(10):  # the connection and the model's metadata, then a warm path
            client.infer(model, feed)
        ms = []
        for _ in range(calls):
            start = time.perf_counter()
            client.infer(model, feed)
            ms.append((time.perf_counter() - start) * 1000)
    p50, p90 = np.percentile(ms, [50, 90])
    return {"p50": float(p50), "p90": float(p90), "calls": calls}


def sized(record: dict[str, Any]) -> dict[str, Any]:
    """The served model at concurrency 1 and 8 against the same variant in process at the same
    sizing (the difference is the serving path) and against the fastest verified runtime in
    process with every core (the lowest lone-request latency among the runtimes' fastest)."""
    served, same = record["served"]["points"], record["in_process"]["served"]["best"]
    fastest = min(record["every_core"].values(), key=lambda side: side["c1_ms"])
    c1_ms, same_ms = served["1"]["p50_ms"], 1000 / same["1"]
    return {
        "served_c1_ms": c1_ms, "same_sizing_c1_ms": same_ms, "serving_path_ms": c1_ms - same_ms,
        "serving_path_share": (c1_ms - same_ms) / c1_ms, "fastest": fastest,
        "c1_extra_ms": c1_ms - fastest["c1_ms"], "served_c8": served["8"]["throughput"],
        "c8_share": served["8"]["throughput"] / fastest["best_rate"],
    }  # fmt: skip


def runner_times(folder: Path, model: str) -> dict[str, Any]:
    """The served model's own ``execute`` and runtime call (its ``_run``), in ms, over its executes
    of one request (nearly all of them at concurrency 1), from the runner's timings hook."""
    lines = [json.loads(x) for f in folder.glob(f"{model}.*.jsonl") for x in f.read_text().splitlines()]
    ones = [x for x in lines if x["requests"] == 1 and "run" in x]
    out: dict[str, Any] = {"executes": len(ones)}
    for phase in ("execute", "run"):
        ms = np.array([x[phase] for x in ones], dtype=np.float64) / 1e6
        if ms.size:
            p50, p90, p99 = np.percentile(ms, [50, 90, 99])
            out[phase] = {"p50": p50, "p90": p90, "p99": p99, "mean": float(ms.mean())}
    return out


def served_points(
    server: Any, repo: Path, side: Published, spec: dict[str, Any], opts: Options, before: dict[str, Any]
) -> dict[str, Any]:
    w: Workload = workload(repo, side.name, spec, FEEDS[spec["name"]])
    hint = max((r["1"] for r in before.values()), default=50.0)
    with cpu_use(server.pid, side.name) as cores:
        points = sweep(server.grpc_url, w, CONCURRENCY, opts, rate_hint=hint, tag=f"{NAME}_{side.name}",
                       metrics_url=server.metrics_url)  # fmt: skip
    return {"points": {str(p["concurrency"]): p for p in points}, "cores_used": cores}


def summarise(
    model: str,
    chosen: dict[str, Published | None],
    points: dict[str, dict[str, Any]],
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
) -> dict[str, Any]:
    served, ort = chosen["served"], chosen["onnxruntime"] or chosen["served"]
    assert served is not None and ort is not None
    best = {r: {c: max(before[r][c], after[r][c]) for c in before[r]} for r in before}
    rate = {name: {c: p["throughput"] for c, p in s["points"].items()} for name, s in points.items()}
    fastest = max((r for r in best if r != "served"), key=lambda r: best[r]["1"])
    return {
        "served": {**served.record(), **points[served.name]},
        "ort_served": {**ort.record(), **points[ort.name]},
        "in_process": {
            r: {**p.record(), "before": before[r], "after": after[r], "best": best[r]}
            for r, p in chosen.items() if r in best and p is not None
        },
        "fastest_in_process_c1": fastest,
        "served_vs_fastest_in_process_c1": rate[served.name]["1"] / best[fastest]["1"],
        "served_vs_ort_served": {c: rate[served.name][c] / rate[ort.name][c] for c in rate[served.name]},
        "served_vs_ort_served_best": max(rate[served.name].values()) / max(rate[ort.name].values()),
    }  # fmt: skip


# ---------------------------------------------------------------- the limit


def host_peak() -> dict[str, Any]:
    text = Path("/proc/cpuinfo").read_text()
    return {"ghz": clock_ghz(text), "cores": os.cpu_count() or 1, "clock_from": "/proc/cpuinfo 'cpu MHz'"}


def limit(
    record: dict[str, Any], onnx: Path, dims: dict[str, list[int]], host: dict[str, Any]
) -> dict[str, Any]:
    """The served variant's FLOPs per call and how far its throughput is from the host's peak."""
    precision = variant_precision(record["served"]["variant"])
    top: Peak | None = peak(cpu_flags(), precision, host["cores"], host["ghz"] or 0.0)
    flops = model_flops(onnx, dims)
    out: dict[str, Any] = {"flops_per_call": flops, "precision": precision}
    if top is None or not top.flops_per_s:
        return out
    rates = {c: p["throughput"] for c, p in record["served"]["points"].items()}
    return {
        **out, "peak": {"unit": top.unit, "flops_per_cycle_core": top.flops_per_cycle_core,
                        "flops_per_s": top.flops_per_s, "how": top.how()},
        "floor_ms": flops / top.flops_per_s * 1000,
        "served_of_peak": {c: r * flops / top.flops_per_s for c, r in rates.items()},
    }  # fmt: skip


def dims_of(model: str) -> dict[str, list[int]]:
    return (
        {"input_ids": [1, 128], "attention_mask": [1, 128]}
        if model == "minilm_encoder"
        else {"input": [1, 3, 224, 224]}
    )


# ---------------------------------------------------------------- rows


def rows_of(model: str, r: dict[str, Any]) -> list[Row]:
    served, ort, s = r["served"], r["ort_served"], r["sized"]
    fastest = s["fastest"]
    vs_ort = r["served_vs_ort_served_best"]
    target = TARGET_VS_ORT.get(model, 1.0)
    per_c = ", ".join(f"c{c} {x:.2f}x" for c, x in r["served_vs_ort_served"].items())
    where = f"{fastest['runtime']} {fastest['variant']} at {fastest['threads']} threads"
    return [
        Row(f"6. CPU runtimes: {model} served ({served['variant']}) c1 p50, beyond the fastest in process",
            f"+{s['c1_extra_ms']:.2f} ms ({s['served_c1_ms']:.2f} / {fastest['c1_ms']:.2f} ms, {where}; "
            f"the serving path {s['serving_path_ms']:.2f} ms, {s['serving_path_share'] * 100:.0f} % of the "
            f"served p50){path_split(served)}{client_c1(served)}", f"<= +{TARGET_C1_EXTRA_MS} ms",
            s["c1_extra_ms"] <= TARGET_C1_EXTRA_MS),
        Row(f"6. CPU runtimes: {model} served c8 / the fastest in process at its best batch",
            f"{s['c8_share']:.2f} ({s['served_c8']:.0f} / {fastest['best_rate']:.0f} inf/s at batch "
            f"{fastest['best_batch']}, {where})", f">= {TARGET_C8_SHARE}", s["c8_share"] >= TARGET_C8_SHARE),
        Row(f"6. CPU runtimes: {model} served / ONNX-Runtime-served ({ort['variant']}) throughput",
            f"{vs_ort:.2f}x (best of c1, c8: {best_rate(served):.0f} / {best_rate(ort):.0f} inf/s; {per_c})",
            f">= {target:g}x", vs_ort >= target),
    ]  # fmt: skip


def path_split(served: dict[str, Any]) -> str:
    """Where the served p50 at concurrency 1 goes: the runtime call in the server (the runner's own
    timing) and the serving path (client, gRPC, Triton, the Python stub's IPC) around it."""
    run = served.get("runner_ms", {}).get("run")
    if run is None:
        return ""
    p50, call = served["points"]["1"]["p50_ms"], run["p50"]
    return f"; of its {p50:.2f} ms p50, {call:.2f} ms runtime call, {p50 - call:.2f} ms serving path"


def client_c1(served: dict[str, Any]) -> str:
    """The same c1 p50 as the project's own client measured it (perf_analyzer's above)."""
    own = served.get("client_c1_ms")
    return "" if own is None else f"; through the project's client (`clients.Client`) {own['p50']:.2f} ms"


def best_rate(side: dict[str, Any]) -> float:
    return float(max(p["throughput"] for p in side["points"].values()))


# ---------------------------------------------------------------- what ran beside


def busy_processes(seconds: float = 2.0, least: float = 0.05) -> list[dict[str, Any]]:
    """Other processes' names (``comm``) and the cores each used over ``seconds``, busiest first."""
    first = _process_cpu()
    time.sleep(seconds)
    last = _process_cpu()
    mine = os.getpid()
    used = [
        (round((cpu - first[pid][1]) / seconds, 2), name)
        for pid, (name, cpu) in last.items() if pid in first and pid != mine
    ]  # fmt: skip
    busiest = sorted((u for u in used if u[0] >= least), reverse=True)[:10]
    return [{"name": name, "cores": cores} for cores, name in busiest]


def _process_cpu() -> dict[int, tuple[str, float]]:
    """Each process's name and CPU seconds."""
    out = {}
    for folder in Path("/proc").glob("[0-9]*"):
        try:
            out[int(folder.name)] = ((folder / "comm").read_text().strip(), cpu_seconds(int(folder.name)))
        except OSError:
            continue  # gone meanwhile
    return out


def run(opts: Options) -> tuple[dict[str, Any], list[Row]]:
    zoo = zoo_models()
    repo = build_repo(NAME, [zoo[m] for m in MODELS])
    host = host_peak()
    results: dict[str, Any] = {"concurrency": list(CONCURRENCY), "host": host, "beside": busy_processes(),
                               "models": {}}  # fmt: skip
    rows: list[Row] = []
    for model in MODELS:
        load = [round(x, 2) for x in os.getloadavg()]
        record = measure_model(repo, model, zoo[model], opts)
        served = record["served"]
        record["limit"] = limit(record, repo / served["model"] / "1" / "model.onnx", dims_of(model), host)
        record["load_avg_before"] = load
        results["models"][model] = record
        rows += rows_of(model, record)
    return results, rows


# ---------------------------------------------------------------- OpenVINO's pinning, alone


def pinning(model: str = "resnet18", rounds: int = 3, seconds: float = 2.0) -> dict[str, Any]:
    """The served OpenVINO graph with the served threads, compiled with OpenVINO's CPU pinning on
    (its default: a thread running an inference is bound to a core, the same first core for every
    one-thread session) and off, alternated: one caller at batch 1, and one caller per instance at
    batch 8 / instances, as ``in_process`` drives them.

        .venv/bin/python -m bench.cpu_runtimes   # after a run: writes bench/results/cpu_runtimes_pinning.json
    """
    side = sides(WORK / f"repo_{NAME}", model, zoo_models()[model])["openvino"]
    assert side is not None
    count = instances(side.config())
    made = {pin: [compiled(side, pin) for _ in range(count)] for pin in (True, False)}
    out: dict[str, Any] = {**side.record(), "instances": count, "load_avg_start": list(os.getloadavg())}
    out["rounds"] = [
        {"pinning": pin, "1": drive(ss[:1], FEEDS[model](1), seconds),
         "8": drive(ss, FEEDS[model](max(1, 8 // count)), seconds)}
        for _ in range(rounds) for pin, ss in made.items()
    ]  # fmt: skip
    out["load_avg_end"] = list(os.getloadavg())
    return out


def compiled(side: Published, pin: bool) -> Any:
    """The side's graph opened as the served model opens it, with OpenVINO's CPU pinning set."""
    from builder.python_models.shared.runtimes import instances, runtime
    from builder.python_models.shared.runtimes.openvino import PINNING

    config = side.config()
    params = {k: v["string_value"] for k, v in config["parameters"].items()} | {PINNING: "1" if pin else "0"}
    return runtime("openvino").open(side.onnx, params["precision"], params, instances=instances(config))


if __name__ == "__main__":
    from bench.common import machine, save

    print(save(f"{NAME}_pinning", {"machine": machine(), "results": pinning()}))
