"""Write every benchmark figure of README.md and docs/*.md from bench/results, its one source.

    .venv/bin/python -m bench.figures            # rewrite the marked blocks
    .venv/bin/python -m bench.figures --check    # compare only; exit 1 naming each stale block

A block is the text between ``<!-- figures: RENDERER [RESULT ...] -->`` and ``<!-- /figures -->``;
RESULT names ``bench/results/<RESULT>.json`` (default: the renderer's own files). Each block opens
with the machine the figures were measured on (date, CPU model and flags, cores, load average,
versions) and then says the figures. Reads JSON only: nothing is measured or imported from builder.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OPEN = re.compile(r"<!-- figures: ([^>]*?) -->")
CLOSE = "<!-- /figures -->"
# What `make bench` (bench.run) runs, in its order.
BENCH_RUN = ("serving_efficiency", "dynamic_batching", "vs_pytriton", "vs_per_request", "queue_bound",
             "build_time", "cpu_runtimes", "detection", "llm", "llm_aiperf", "llm_openai_cpu",
             "rerank")  # fmt: skip
NOT_RECORDED = "not recorded"


class FiguresError(Exception):
    """A block that cannot be rendered: unknown renderer, missing or malformed results file."""


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Machine:
    """Where figures were measured, as far as the results file recorded it."""

    date: str | None = None
    cpu: str | None = None
    cpu_flags: tuple[str, ...] | None = None
    cores: int | None = None
    load_avg: tuple[float, ...] | None = None
    versions: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any], date: str | None = None) -> Machine:
        versions: dict[str, str] = {}
        if record.get("python"):
            versions["Python"] = str(record["python"])
        if record.get("tritonserver"):
            versions["tritonserver"] = str(record["tritonserver"])
        versions.update({k: str(v) for k, v in (record.get("versions") or {}).items()})
        flags = record.get("cpu_flags")
        load = record.get("load_avg")
        return cls(
            date=date or record.get("date"),
            cpu=record.get("cpu"),
            cpu_flags=tuple(flags) if flags is not None else None,
            cores=record.get("cores") or record.get("cpus"),
            load_avg=tuple(load) if load is not None else None,
            versions=tuple(versions.items()) or None,
        )

    def header(self, source: str) -> str:
        flags = (
            NOT_RECORDED if self.cpu_flags is None else (", ".join(self.cpu_flags) or "none of those read")
        )
        load = NOT_RECORDED if self.load_avg is None else " / ".join(f"{x:g}" for x in self.load_avg)
        versions = NOT_RECORDED if self.versions is None else ", ".join(f"{k} {v}" for k, v in self.versions)
        return (
            f"*Measured {self.date or 'on a date not recorded'}; CPU {self.cpu or NOT_RECORDED}, "
            f"flags {flags}, cores {self.cores or NOT_RECORDED}; load average {load} at start; "
            f"versions: {versions} ({source}).*"
        )


@dataclass(frozen=True)
class Row:
    """One line of a benchmark's summary table (bench.common.Row as saved)."""

    benchmark: str
    measured: str
    target: str
    met: bool | None

    def cells(self) -> str:
        met = "-" if self.met is None else ("yes" if self.met else "**no**")
        return f"| {self.benchmark} | {self.measured} | {self.target} | {met} |"


@dataclass(frozen=True)
class Result:
    """One results file, read."""

    name: str
    data: dict[str, Any]

    @property
    def source(self) -> str:
        return f"`bench/results/{self.name}.json`"

    def machine(self, date: str | None = None, load_avg: Sequence[float] | None = None) -> Machine:
        machine = Machine.of(self.data.get("machine") or {}, date)
        return replace(machine, load_avg=tuple(load_avg)) if load_avg is not None else machine

    def rows(self) -> list[Row]:
        return [Row(r["benchmark"], r["measured"], r["target"], r["met"]) for r in self.data.get("rows", [])]

    def get(self, *keys: str) -> Any:
        value: Any = self.data
        for key in keys:
            if not isinstance(value, Mapping) or key not in value:
                raise FiguresError(f"{self.source}: no '{'.'.join(keys)}'")
            value = value[key]
        return value


def load(name: str, results: Path) -> Result:
    path = results / f"{name}.json"
    try:
        return Result(name, json.loads(path.read_text()))
    except FileNotFoundError:
        raise FiguresError(f"{path.relative_to(results.parent.parent)}: no such results file") from None
    except json.JSONDecodeError as exc:
        raise FiguresError(f"{path}: not JSON ({exc})") from None


# ---------------------------------------------------------------- renderers


def _table(rows: Iterable[Row]) -> str:
    return "\n".join(
        ["| benchmark | measured | target | met? |", "|---|---|---|---|", *(r.cells() for r in rows)]
    )


def _ms(value: float) -> str:
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def render_rows(results: Sequence[Result], results_dir: Path) -> str:
    """The summary rows of one or more benchmarks, under the first one's machine."""
    first = results[0]
    sources = (
        ", ".join(r.source for r in results)
        if len(results) < 3
        else (f"`bench/results/`: {', '.join(r.name for r in results)}")
    )
    return first.machine().header(sources) + "\n\n" + _table(row for r in results for row in r.rows())


def render_bench_run(results: Sequence[Result], results_dir: Path) -> str:
    """The whole `make bench` table, and how long the run took (its summary.md). A benchmark
    measured in another run (``bench.run --only``) gets a table under its own machine header."""
    summary = results_dir / "summary.md"
    total = re.search(r"total ([\d.]+) min", summary.read_text()) if summary.is_file() else None
    took = f"The run took {total.group(1)} min (`bench/results/summary.md`).\n\n" if total else ""
    return took + "\n\n".join(render_rows(group, results_dir) for group in by_run(results))


def by_run(results: Sequence[Result]) -> list[list[Result]]:
    """The results grouped by the run that wrote them (the same machine record), in first-seen order."""
    groups: list[list[Result]] = []
    for r in results:
        same = next((g for g in groups if g[0].data.get("machine") == r.data.get("machine")), None)
        if same is None:
            groups.append([r])
        else:
            same.append(r)
    return groups


def render_llm(results: Sequence[Result], results_dir: Path) -> str:
    """bench.llm's rows, dated when its measurement began (the run's header is when `make bench` did)."""
    (r,) = results
    inner = r.data.get("results") or {}
    before = [v for k, v in (inner.get("results") or {}).items() if k.startswith("load_avg_before")]
    machine = r.machine(date=inner.get("date"), load_avg=before[0] if before else None)
    return machine.header(r.source) + "\n\n" + _table(r.rows())


def _lines(*parts: str) -> str:
    return "\n".join(parts)


def render_queue_bound(results: Sequence[Result], results_dir: Path) -> str:
    (r,) = results
    over, c1 = r.get("results", "overload"), r.get("results", "concurrency_1")
    p99, timeout = _ms(over["latency_ms"]["all"]["p99"]), r.get("results", "queue_timeout_s")
    overload = (
        f"{over['sent']} gRPC requests to `resnet18` from {over['concurrency']} clients at once "
        f"(closed loop, no pacing) ended as {over['succeeded']} results and {over['rejected']} "
        f"refusals, {over['lost']} lost; accepted p99 {p99} against the {timeout:g} s queue timeout."
    )
    alone = (
        f"At concurrency 1 the bounded model ran {c1['ratio']:.3f}x the throughput of the same model "
        "with no bound (perf_analyzer, runs alternated in one server)."
    )
    return _lines(r.machine().header(r.source), "", f"{overload} {alone}")


def render_reliability(results: Sequence[Result], results_dir: Path) -> str:
    (r,) = results
    over, prio, kill, live = (r.get(k) for k in ("overload", "priority", "kill", "live_update"))
    dates = sorted(str(s["recorded"]) for s in (over, prio, kill, live))
    span = f"{dates[0]} to {dates[-1]}".replace("T", " ").replace("Z", " UTC")
    high, low = prio["latency_ms"]["high"], prio["latency_ms"]["low"]
    accepted = _ms(over["latency_ms"]["all"]["p99"])
    return _lines(
        r.machine(date=span).header(r.source),
        "",
        f"* **Overload** ({over['sent']} requests from {over['concurrency']} clients): sent "
        f"{over['sent']} = succeeded {over['succeeded']} + rejected {over['rejected']}, lost "
        f"{over['lost']}; accepted p99 {accepted}, slowest request {over['max_seconds']:.1f} s.",
        f"* **Priority** ({prio['sent']} requests from {prio['concurrency']} clients, two levels): "
        f"the high class kept p50 / p99 {high['p50']:.0f} / {high['p99']:.0f} ms against the low "
        f"class's {low['p50']:.0f} / {low['p99']:.0f} ms; lost {prio['lost']}.",
        f"* **Server killed** (SIGKILL under load): the typed `ServerUnavailable` within "
        f"{kill['slowest_error_after_kill_s']:g} s, serving again {kill['recovery_s']:g} s after a restart.",
        f"* **Live update** (explicit model control): {live['lost']} of {live['sent']} requests lost, "
        f"{live['in_flight_at_reload']} in flight at the reload.",
    )


LLM_SERVING_HEAD = (
    "| dtype | 1 stream tokens/s | TTFT p50, 1 stream | 16 streams tokens/s | gain | server start | RSS |",
    "|---|---|---|---|---|---|---|",
)


def render_llm_serving(results: Sequence[Result], results_dir: Path) -> str:
    (r,) = results
    lines = [r.machine().header(r.source), "", *LLM_SERVING_HEAD]
    for key, run in r.get("runs").items():
        setting = dict(part.split("=", 1) for part in key.split())
        label = setting.pop("dtype", key) + "".join(f", {k} {v}" for k, v in setting.items())
        one, many = run["one_stream"], run["sixteen_streams"]
        cells = (
            label,
            f"{one['output_tokens_per_s']:g}",
            f"{one['ttft_ms_p50']:.0f} ms",
            f"{many['output_tokens_per_s']:g}",
            f"{run['batching_gain']:.1f}x",
            f"{run['server_start_s']:.0f} s",
            f"{run['rss_mib_idle']:.0f} MiB",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return _lines(*lines)


def render_client_overhead(results: Sequence[Result], results_dir: Path) -> str:
    (r,) = results
    env = r.get("environment")
    grpc, http = r.get("overhead_batch1", "grpc"), r.get("overhead_batch1", "http")
    shm_grpc, shm_http = r.get("shm_16MiB", "grpc"), r.get("shm_16MiB", "http")
    machine = Machine.of(r.get("machine"))
    text = (
        f"`Client.infer` against the bare tritonclient call on `simple` at batch 1 (medians of "
        f"{env['iterations']} calls): {grpc['overhead_pct']:.1f} % overhead over gRPC, "
        f"{http['overhead_pct']:.1f} % over HTTP. A 16 MiB input through shared memory took "
        f"{shm_grpc['shm_over_plain']:.2f}x the time of plain gRPC and "
        f"{shm_http['shm_over_plain']:.2f}x that of plain HTTP."
    )
    image = r.get("image_c1")
    bare, ours = image["bare"], image["client"]
    text += (
        f" An image (FP32 [1, 3, 224, 224], 602 KB) to the served `{image['model']}` over gRPC at "
        f"concurrency 1: p50 {ours['median_us'] / 1e3:.2f} ms against "
        f"{bare['median_us'] / 1e3:.2f} ms for the bare call ({image['client_over_bare']:.2f}x, "
        f"paired), the client's CPU {ours['cpu_us_per_call']:.0f} against "
        f"{bare['cpu_us_per_call']:.0f} µs a call."
    )
    return _lines(machine.header(r.source), "", text)


def render_tune(results: Sequence[Result], results_dir: Path) -> str:
    (r,) = results
    confirm = r.get("confirm")
    command = f"tritonforge tune {r.get('model')} --p99-ms {r.get('budget_ms'):g}"
    text = (
        f"`{command}` chose `{confirm['chosen']['label']}` over the spec's "
        f"`{confirm['default']['label']}`; measured again side by side in one run it gave "
        f"{confirm['throughput_ratio']:.2f}x the throughput at {confirm['p99_ratio']:.2f}x the p99."
    )
    return _lines(Machine(cores=r.data.get("cpus")).header(r.source), "", text)


Renderer = Callable[[Sequence[Result], Path], str]


def render_openai(results: Sequence[Result], results_dir: Path) -> str:
    """bench.openai_endpoint: the same chat through the OpenAI endpoint and the gRPC stream."""
    (r,) = results
    one, many, engine = r.get("sequential"), r.get("concurrent"), r.get("engine")
    text = (
        f"{engine['new_tokens']} new tokens, {engine['dtype']}: one stream at a time "
        f"({one['grpc']['requests']} each, alternated), time to first token p50 "
        f"{one['grpc']['ttft_ms_p50']:.1f} ms over gRPC and {one['openai']['ttft_ms_p50']:.1f} ms through "
        f"the OpenAI endpoint, whole answer p50 {one['grpc']['total_ms_p50']:.0f} / "
        f"{one['openai']['total_ms_p50']:.0f} ms; {many['grpc']['requests']} streams at once "
        f"{many['grpc']['output_tokens_per_s']:g} / {many['openai']['output_tokens_per_s']:g} tokens/s."
    )
    return _lines(r.machine().header(r.source), "", text)


BACKENDS_HEAD = (
    "| side | tokens/s at 16, per round | / vLLM (sums) | rounds | cores used: "
    "frontend / engine / tritonserver / client / other |",
    "|---|---|---|---|---|",
)
CORE_KEYS = ("frontend", "engine", "server", "client", "other")


def backends_table(sides: Mapping[str, Any]) -> str:
    """bench.llm_variants' sides: each one's rounds, its ratio to vLLM's server and cores used."""
    lines = list(BACKENDS_HEAD)
    for name, s in sides.items():
        spread = f"{min(s['round_ratios']):.2f}-{max(s['round_ratios']):.2f}"
        rounds = ", ".join(f"{x:.0f}" for x in s["round_tps_c16"])
        cores = " / ".join(f"{s['cores_used'][k]:.2f}" for k in CORE_KEYS)
        lines.append(f"| {name} | {rounds} | {s['vs_vllm_c16']:.3f}x | {spread} | {cores} |")
    return "\n".join(lines)


def render_llm_backends(results: Sequence[Result], results_dir: Path) -> str:
    """Every record of bench.llm_variants in llm_per_token.json (``runs.<key>`` holding ``sides``)."""
    (r,) = results
    runs = {k: v for k, v in r.get("runs").items() if isinstance(v, Mapping) and "sides" in v}
    if not runs:
        raise FiguresError(f"{r.source}: no bench.llm_variants record under 'runs'")
    return "\n\n".join(_backends_run(r, key, run) for key, run in runs.items())


def _ratios(run: Mapping[str, Any]) -> dict[str, float]:
    """Each side's ratio to vLLM: a whole earlier record's, or the ratios an older one kept."""
    if "sides" in run:
        return {name: side["vs_vllm_c16"] for name, side in run["sides"].items()}
    return dict(run["vs_vllm_c16"])


def _backends_run(r: Result, key: str, run: Mapping[str, Any]) -> str:
    rounds = len(next(iter(run["sides"].values()))["round_tps_c16"])
    text = (
        f"`runs.{key}`: {run['dtype_reason']}; {rounds} rounds, the order rotated each round, "
        f"{run['minutes']} min; load average {' / '.join(map(str, run['load_avg_after']))} after."
    )
    header = Machine.of(run).header(f"{r.source}, `runs.{key}`")
    earlier = [
        f"{e['date']} ({e.get('cpu') or NOT_RECORDED}): "
        + ", ".join(f"{name} {ratio:.3f}x" for name, ratio in _ratios(e).items())
        for e in run.get("earlier", [])
    ]
    before = ["", "Earlier runs, each side / vLLM: " + "; ".join(earlier) + "."] if earlier else []
    return _lines(header, "", text, "", backends_table(run["sides"]), *before)


AIPERF_HEAD = (
    "| server | tool | streams | requests | TTFT p50 | ITL p50 | output tokens/s |",
    "|---|---|---|---|---|---|---|",
)
AIPERF_SIDES = {"tritonforge": "tritonforge (Triton + `vllm_engine`)", "vllm": "vLLM's own server"}


def _aiperf_tool(side: str, tool: str, version: str) -> str:
    if tool == "aiperf":
        via = "the project's OpenAI endpoint" if side == "tritonforge" else "`/v1/completions`"
        return f"aiperf {version}, {via}"
    return "own (perf_analyzer, " + ("gRPC)" if side == "tritonforge" else "`/v1/completions`)")


def render_llm_aiperf(results: Sequence[Result], results_dir: Path) -> str:
    """bench.llm_aiperf: aiperf's figures beside the project's own, per server and concurrency."""
    (r,) = results
    record = r.get("results")
    if record.get("skipped"):
        return _lines(r.machine().header(r.source), "", f"Skipped: {record['skipped']}.")
    m, version = r.get("results", "results"), str(record.get("aiperf", "?"))
    lines = [r.machine(date=record.get("date"), load_avg=m.get("load_avg_before")).header(r.source), ""]
    lines += [*AIPERF_HEAD]
    for side, label in AIPERF_SIDES.items():
        for tool in ("own", "aiperf"):
            for point in r.get("results", "results", side, tool).values():
                lines.append(
                    f"| {label} | {_aiperf_tool(side, tool, version)} | {point['concurrency']} | "
                    f"{point['requests']} | {point['ttft_ms_p50']:.0f} ms | {point['itl_ms_p50']:.1f} ms | "
                    f"{point['output_tokens_per_s']:.0f} |"
                )
    return _lines(*lines, "", _table(r.rows()))


OPENAI_CPU_HEAD = (
    "| side | serving CPU per token | / vLLM | per round | by process | engine core per token | "
    "tokens/s per round |",
    "|---|---|---|---|---|---|---|",
)


def openai_cpu_table(sides: Mapping[str, Any]) -> str:
    """bench.llm_openai_cpu's sides: CPU µs per streamed token of the serving processes."""
    lines = list(OPENAI_CPU_HEAD)
    for name, s in sides.items():
        rounds = ", ".join(f"{x:.0f}" for x in s["round_serving_us_per_token"])
        roles = ", ".join(f"{role} {us:.0f}" for role, us in s["by_process_us_per_token"].items())
        tps = ", ".join(f"{x:.0f}" for x in s["round_tokens_per_s"])
        lines.append(
            f"| {name} | {s['serving_us_per_token']:.0f} µs | {s['vs_vllm']:.2f}x | {rounds} | {roles} | "
            f"{s['engine_core_us_per_token']:.0f} µs | {tps} |"
        )
    return "\n".join(lines)


def render_llm_openai_cpu(results: Sequence[Result], results_dir: Path) -> str:
    """bench.llm_openai_cpu: the serving processes' CPU per streamed token, each side beside vLLM's
    own server, from the record's own machine (its date, CPU, flags and load when it started)."""
    (r,) = results
    record = r.get("results")
    if record.get("skipped"):
        return _lines(r.machine().header(r.source), "", f"Skipped: {record['skipped']}.")
    load = record["load"]
    extra = record.get("model_json_extra") or {}
    setting = ", ".join(f"{k} {v}" for k, v in extra.items()) or "none"
    text = (
        f"{load['concurrency'][0]} streams, {load['output_tokens']} new tokens (`ignore_eos`), "
        f"{record['rounds']} rounds in a rotated order, {record['minutes']} min; engine "
        f"{record['engine']['dtype']}, stream_interval {record.get('stream_interval', 1)}; model.json "
        f"additions: {setting}; load average {' / '.join(map(str, record['load_avg_after']))} after."
    )
    header = Machine.of(record).header(f"{r.source}, `results`")
    return _lines(header, "", text, "", openai_cpu_table(record["sides"]), "", _table(r.rows()))


OPENAI_CPU_RUNS_HEAD = (
    "| run | when (load average) | what ran | OpenAI path | gRPC path | vLLM's server | OpenAI / vLLM | "
    "OpenAI path by process |",
    "|---|---|---|---|---|---|---|---|",
)


def render_llm_openai_cpu_runs(results: Sequence[Result], results_dir: Path) -> str:
    """``python -m bench.llm_openai_cpu --key KEY`` records: serving CPU µs per token, each run,
    with its date and load average (read at its start, or where its ``note`` says so, its end)."""
    (r,) = results
    runs = r.get("runs")
    lines = [*OPENAI_CPU_RUNS_HEAD]
    first_cpu = next(iter(runs.values())).get("cpu")
    for key, run in runs.items():
        sides = run["sides"]
        when = "at its end" if run.get("note") else "at its start"
        load = f"{run['date']} ({' / '.join(map(str, run['load_avg']))} {when})"
        if run.get("cpu") != first_cpu:  # another machine than the header's
            load += f", on {run['cpu']} ({run['cores']} cores; {', '.join(run['cpu_flags'])})"
        roles = ", ".join(f"{k} {v:.0f}" for k, v in sides["openai"]["by_process_us_per_token"].items())
        us = {side: f"{sides[side]['serving_us_per_token']:.0f} µs" for side in ("openai", "grpc", "vllm")}
        lines.append(
            f"| `{key}` | {load} | {run['what']} | {us['openai']} | {us['grpc']} | {us['vllm']} | "
            f"{sides['openai']['vs_vllm']:.2f}x | {roles} |"
        )
    first = Machine.of(next(iter(runs.values())), date="on the dates in the table")
    header = (
        replace(first, load_avg=None)
        .header(r.source)
        .replace(f"load average {NOT_RECORDED} at start", "load averages in the table")
    )
    if any(run.get("cpu") != first_cpu for run in runs.values()):
        header = header.replace(f"CPU {first.cpu},", f"CPU {first.cpu} (another named in its runs),")
    return _lines(header, "", *lines)


RUNTIMES_HEAD = (
    "| model | served variant | served c1 / c8 | ONNX-Runtime-served c1 / c8 | in-process ONNX Runtime "
    "c1 / c8 | in-process OpenVINO c1 / c8 | served / fastest in-process, c1 | served / ORT-served |",
    "|---|---|---|---|---|---|---|---|",
)
SIZED_HEAD = (
    "| model | served at | served c1 p50 | in process at its sizing, c1 | the serving path | fastest "
    "in process with every core, c1 | beyond it | served c8 | its best batch | served / best |",
    "|---|---|---|---|---|---|---|---|---|---|",
)
LIMIT_HEAD = (
    "| model | served computes in | GFLOP per call | host peak for it | floor per call | served c1: "
    "GFLOP/s, of peak | served c8: GFLOP/s, of peak |",
    "|---|---|---|---|---|---|---|",
)


def _rates(points: Mapping[str, Any]) -> str:
    return " / ".join(f"{points[c]:.0f}" for c in ("1", "8"))


def _served_rates(side: Mapping[str, Any]) -> str:
    return _rates({c: p["throughput"] for c, p in side["points"].items()})


def _in_process_cell(m: Mapping[str, Any], runtime: str) -> str:
    side = m["in_process"].get(runtime)
    return f"{_rates(side['best'])} (`{side['variant']}`)" if side else "not run (no variant)"


def runtimes_table(models: Mapping[str, Any]) -> str:
    """bench.cpu_runtimes: inferences/s of each side at concurrency 1 and 8, and the ratios."""
    lines = list(RUNTIMES_HEAD)
    for name, m in models.items():
        served, ort = m["served"], m["ort_served"]
        vs_ort = " / ".join(f"{x:.2f}x" for x in m["served_vs_ort_served"].values())
        in_process = " | ".join(_in_process_cell(m, runtime) for runtime in ("onnxruntime", "openvino"))
        lines.append(
            f"| {name} | `{served['variant']}` | {_served_rates(served)} | {_served_rates(ort)} "
            f"(`{ort['variant']}`) | {in_process} | "
            f"{m['served_vs_fastest_in_process_c1']:.2f} ({m['fastest_in_process_c1']}) | {vs_ort} |"
        )
    return "\n".join(lines)


def _of_peak(lim: Mapping[str, Any], rate: float, c: str) -> str:
    return f"{rate * lim['flops_per_call'] / 1e9:.0f}, {lim['served_of_peak'][c] * 100:.1f} %"


def _sizing(served_at: Mapping[str, Any]) -> str:
    if not served_at:
        return "not recorded"
    threads = served_at.get("threads") or "all"
    hint = f" {served_at['hint']}/{served_at.get('streams', 1)}" if served_at.get("hint") else ""
    return f"{served_at['instances']} x {threads} threads{hint}"


def sized_table(models: Mapping[str, Any]) -> str:
    """bench.cpu_runtimes: the served model at c1 and c8 against the same variant in process at its
    sizing (the serving path is the difference) and the fastest runtime in process with every core."""
    lines = list(SIZED_HEAD)
    for name, m in models.items():
        s = m.get("sized")
        if s is None:
            lines.append(f"| {name} | not measured in this run |  |  |  |  |  |  |  |  |")
            continue
        f = s["fastest"]
        lines.append(
            f"| {name} | `{m['served']['variant']}` {_sizing(m['served'].get('served_at', {}))} | "
            f"{s['served_c1_ms']:.2f} ms | {s['same_sizing_c1_ms']:.2f} ms | {s['serving_path_ms']:.2f} ms "
            f"({s['serving_path_share'] * 100:.0f} %) | {f['c1_ms']:.2f} ms (`{f['variant']}`, "
            f"{f['threads']} threads) | +{s['c1_extra_ms']:.2f} ms | {s['served_c8']:.0f}/s | "
            f"{f['best_rate']:.0f}/s (batch {f['best_batch']}) | {s['c8_share']:.2f} |"
        )
    return "\n".join(lines)


def limit_table(models: Mapping[str, Any]) -> str:
    """bench.cpu_runtimes: the served variant's FLOPs per call against the host's peak."""
    lines = list(LIMIT_HEAD)
    for name, m in models.items():
        lim, points = m["limit"], m["served"]["points"]
        gflop = f"{lim['flops_per_call'] / 1e9:.2f}"
        if "peak" not in lim:
            lines.append(f"| {name} | {lim['precision']} | {gflop} | no unit for it read | - | - | - |")
            continue
        served = " | ".join(_of_peak(lim, points[c]["throughput"], c) for c in ("1", "8"))
        lines.append(
            f"| {name} | {lim['precision']} | {gflop} | {lim['peak']['how']} | {lim['floor_ms']:.2f} ms | "
            f"{served} |"
        )
    return "\n".join(lines)


STUB_HEAD = (
    "| model | side | served c1, ms per inference | in the stub, one request: execute mean | runtime call "
    "p50 / p99 / mean | in process c1, ms per inference |",
    "|---|---|---|---|---|---|",
)


def stub_table(models: Mapping[str, Any]) -> str:
    """bench.cpu_runtimes: a served inference at c1 against its runner's own execute and runtime call
    (the runner's timings hook) and the same runtime in process."""
    lines = list(STUB_HEAD)
    for name, m in models.items():
        for key in ("served", "ort_served"):
            side = m[key]
            t = side.get("runner_ms") or {}
            if "run" not in t:
                continue
            local = m["in_process"].get(side["runtime"]) or {}
            here = f"{1000 / local['best']['1']:.2f} (`{local['variant']}`)" if local else "-"
            run = " / ".join(f"{t['run'][k]:.2f}" for k in ("p50", "p99", "mean"))
            lines.append(
                f"| {name} | `{side['model']}` | {1000 / side['points']['1']['throughput']:.2f} | "
                f"{t['execute']['mean']:.2f} ({t['executes']} executes) | {run} | {here} |"
            )
    return "\n".join(lines)


def render_cpu_runtimes(results: Sequence[Result], results_dir: Path) -> str:
    """bench.cpu_runtimes: the sides in inferences/s, the limit, the rows; load through the run."""
    (r,) = results
    models = r.get("results", "models")
    loads = "; ".join(f"{k} {' / '.join(map(str, m['load_avg_before']))}" for k, m in models.items())
    beside = ", ".join(f"{p['name']} {p['cores']:.2f}" for p in r.get("results", "beside")) or "nothing"
    text = (
        f"Load average before each model: {loads}. Cores other processes used at the start: {beside}. "
        f"Clock {r.get('results', 'host', 'ghz'):g} GHz from {r.get('results', 'host', 'clock_from')}."
    )
    return _lines(
        r.machine().header(r.source),
        "",
        text,
        "",
        runtimes_table(models),
        "",
        sized_table(models),
        "",
        limit_table(models),
        "",
        stub_table(models),
        "",
        _table(r.rows()),
    )


INT8_METHODS = (
    ("ort_minmax", "ORT quantize_static, minmax, symmetric"),
    ("ort_percentile", "ORT quantize_static, percentile 99.999, asymmetric"),
    ("nncf", "NNCF quantize"),
    ("nncf_ac", "NNCF quantize_with_accuracy_control"),
    ("search", "tritonforge's INT8 search"),
    ("search_wide", "tritonforge's INT8 search, a wider budget"),
)
INT8_HEADER = (
    "| model | method | within tolerance | mean / min cosine | nodes in float | seconds | ms per image "
    "(fp32) |\n|---|---|---|---|---|---|---|"
)


def _int8_row(name: str, label: str, fp32_ms: float, m: Mapping[str, Any]) -> str:
    if "error" in m:
        return f"| {name} | {label} | refused: {m['error']} | | | | |"
    ms = m.get("ms")
    speed = f"{ms:.2f} ({fp32_ms:.2f})" if ms else f"- ({fp32_ms:.2f})"
    verdict = "yes" if m["passed"] else "**no**"
    cosines = f"{m['mean_cosine']:.4f} / {m['min_cosine']:.4f}"
    return f"| {name} | {label} | {verdict} | {cosines} | {m['float_nodes']} | {m['seconds']:.1f} | {speed} |"


def _short_search_line(line: str) -> str:
    """The build's search line without its lists of nodes (the manifest and the log keep them)."""
    line = re.sub(r" \([^()]*\) after", " after", line)
    return line.split("; calibration.exclude_nodes:")[0]


def render_int8_search(results: Sequence[Result], results_dir: Path) -> str:
    """bench.int8_search: each third-party model's INT8 by each method, against the same tolerance."""
    (r,) = results
    tolerance = r.get("results", "tolerance")
    lines = [r.machine().header(r.source), "", f"Tolerance: {json.dumps(tolerance)} on every output.", ""]
    lines.append(INT8_HEADER)
    searched = []
    for name, model in r.get("results", "models").items():
        for key, label in INT8_METHODS:
            if key in model["methods"]:
                lines.append(_int8_row(name, label, model["fp32_ms"], model["methods"][key]))
        for key in ("search", "search_wide"):
            found = model["methods"].get(key, {})
            if found.get("line"):
                line = _short_search_line(found["line"])
                budget = f", max_trials {found['max_trials']}" if "max_trials" in found else ""
                searched.append(f"* `{name}` ({model['what']}{budget}): `{line[line.find('search:') :]}`")
    return _lines(*lines, "", "The search's lines in the build's log:", "", *searched)


@dataclass(frozen=True)
class Kind:
    render: Renderer
    default: tuple[str, ...]  # results read when the marker names none


KINDS: dict[str, Kind] = {
    "bench_run": Kind(render_bench_run, BENCH_RUN),
    "rows": Kind(render_rows, ()),
    "llm": Kind(render_llm, ("llm",)),
    "queue_bound": Kind(render_queue_bound, ("queue_bound",)),
    "reliability": Kind(render_reliability, ("reliability",)),
    "llm_serving": Kind(render_llm_serving, ("llm_serving",)),
    "client_overhead": Kind(render_client_overhead, ("client_overhead",)),
    "tune": Kind(render_tune, ("tune_resnet18/tune",)),
    "openai": Kind(render_openai, ("openai",)),
    "llm_backends": Kind(render_llm_backends, ("llm_per_token",)),
    "llm_aiperf": Kind(render_llm_aiperf, ("llm_aiperf",)),
    "llm_openai_cpu": Kind(render_llm_openai_cpu, ("llm_openai_cpu",)),
    "llm_openai_cpu_runs": Kind(render_llm_openai_cpu_runs, ("llm_openai_cpu_runs",)),
    "cpu_runtimes": Kind(render_cpu_runtimes, ("cpu_runtimes",)),
    "int8_search": Kind(render_int8_search, ("int8_search",)),
}


# ---------------------------------------------------------------- blocks in documents


@dataclass(frozen=True)
class Block:
    """One marked block of a document: what it names and where its body lies."""

    label: str  # the marker's text, e.g. "queue_bound" or "rows serving_efficiency_no_spin"
    start: int  # body start (after the opening marker)
    end: int  # body end (the closing marker)

    def render(self, results_dir: Path) -> str:
        kind_name, *names = self.label.split()
        kind = KINDS.get(kind_name)
        if kind is None:
            raise FiguresError(f"unknown figures block '{kind_name}' (known: {', '.join(KINDS)})")
        names = names or list(kind.default)
        if not names:
            raise FiguresError(f"figures block '{kind_name}' needs a results file name")
        return kind.render([load(n, results_dir) for n in names], results_dir)


def blocks(text: str, where: str) -> list[Block]:
    found = []
    for match in OPEN.finditer(text):
        end = text.find(CLOSE, match.end())
        following = OPEN.search(text, match.end())
        if end < 0 or (following and following.start() < end):
            raise FiguresError(f"{where}: block '{match.group(1)}' has no {CLOSE}")
        found.append(Block(match.group(1).strip(), match.end(), end))
    return found


def rewrite(text: str, where: str, results_dir: Path) -> tuple[str, list[str]]:
    """The text with every block rendered, and the labels of the blocks that changed."""
    out, stale, pos = [], [], 0
    for block in blocks(text, where):
        try:
            body = "\n" + block.render(results_dir) + "\n"
        except FiguresError as exc:
            raise FiguresError(f"{where}: block '{block.label}': {exc}") from None
        out += [text[pos : block.start], body]
        if text[block.start : block.end] != body:
            stale.append(block.label)
        pos = block.end
    return "".join(out) + text[pos:], stale


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def run(root: Path, results_dir: Path, check: bool) -> list[str]:
    """Rewrite (or only compare) every document; returns 'file: block' for each stale block."""
    stale = []
    for doc in documents(root):
        if not doc.is_file():
            continue
        where = str(doc.relative_to(root))
        text = doc.read_text()
        new, changed = rewrite(text, where, results_dir)
        stale += [f"{where}: block '{label}'" for label in changed]
        if changed and not check:
            doc.write_text(new)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.figures", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 listing stale blocks")
    args = parser.parse_args(argv)
    try:
        stale = run(ROOT, RESULTS, args.check)
    except FiguresError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in stale:
        print(
            f"{'stale' if args.check else 'rewrote'}: {line}", file=sys.stderr if args.check else sys.stdout
        )
    if args.check and stale:
        print("run: .venv/bin/python -m bench.figures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
