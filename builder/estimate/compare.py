"""The memory plan against the built repository, and against the real server's memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.estimate.llm import LLMRow, checkpoint_sizes, llm_rows
from builder.estimate.plan import MIB, SERVER_BASE, CpuServing, Row, core_rows, python_row
from builder.estimate.rss import Load, Measured, measure, measure_llms
from builder.spec import ModelSpec, Spec, Variant


def host_memory() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def plan(spec: Spec, repo: Path) -> list[Row]:
    """Rows for every core model (each published variant on the cpu as the build serves it, each
    precision on the gpu) and every Python model."""
    manifest = json.loads((repo / "manifest.json").read_text())
    rows: list[Row] = []
    for model in spec.models:
        entry = manifest["models"][model.name]
        graphs = {
            Variant.parse(v).precision.graph: repo / name / "1" / "model.onnx"
            for name, v in entry["published"].items()
        }
        rows += core_rows(model, graphs, Variant.parse(entry["served"]), published(model, entry))
    rows += [python_row(pm) for pm in spec.python_models]
    return rows


def published(model: ModelSpec, entry: dict[str, Any]) -> list[CpuServing]:
    """Each published variant of a manifest's entry at the instances the build serves it at (the
    served one's ``served_at``, the others' ``published_at``; the spec's where none is recorded)."""
    sizes = {entry["served"]: entry.get("served_at") or {}}
    sizes |= {entry["published"][n]: at for n, at in (entry.get("published_at") or {}).items()}
    return [
        CpuServing(Variant.parse(v), int(sizes.get(v, {}).get("instances", model.instances.count)))
        for v in dict.fromkeys(entry["published"].values())
    ]


def served_models(spec: Spec, repo: Path) -> dict[str, tuple[ModelSpec, str]]:
    """Served model name -> (spec, variant) for every published core variant."""
    manifest = json.loads((repo / "manifest.json").read_text())
    out = {}
    for model in spec.models:
        for name, variant in manifest["models"][model.name]["published"].items():
            out[name] = (model, variant)
    return out


def compare(rows: list[Row], repo: Path, spec: Spec, log: Any = None) -> list[dict[str, Any]]:
    """Estimate vs measured (server + stubs) for each published core variant, loaded alone."""
    served = served_models(spec, repo)
    cpu = {(r.model, r.variant): r for r in rows if r.device == "cpu"}
    loads = {n: Load(m, cpu[m.name, v].instances) for n, (m, v) in served.items()}
    baseline, measured = measure(repo, loads, log=log or (lambda _: None))
    out = []
    for m in measured:
        model, variant = served[m.model]
        row = cpu[model.name, variant]
        out.append(_result(m, baseline, model.name, variant, row.total, row.model_bytes))
    return out


def llm_plan(spec: Spec, repo: Path, gpu_memory: int | None) -> list[LLMRow]:
    """Rows for every LLM: its CPU engine and, given a GPU size, its GPU section."""
    return [r for llm in spec.llms for r in llm_rows(llm, checkpoint_sizes(repo, llm), gpu_memory)]


def compare_llms(rows: list[LLMRow], repo: Path, spec: Spec, log: Any = None) -> list[dict[str, Any]]:
    """The CPU plan of each LLM vs the measured tree (server + stub + vLLM engine), loaded alone."""
    if not spec.llms:
        return []
    streams = {llm.name: llm.max_num_seqs for llm in spec.llms}
    baseline, measured = measure_llms(repo, streams, log=log or (lambda _: None))
    out = []
    for m in measured:
        row = next(r for r in rows if r.llm == m.model and r.device == "cpu")
        out.append(_result(m, baseline, m.model, row.dtype, row.total, row.total - SERVER_BASE))
    return out


def _result(
    m: Measured, baseline: int, model: str, variant: str, estimate: int, model_estimate: int
) -> dict[str, Any]:
    return {
        "served_as": m.model, "model": model, "variant": variant,
        "estimate_mib": round(estimate / MIB, 1), "measured_mib": round(m.total / MIB, 1),
        "server_mib": round(m.server / MIB, 1), "stubs_mib": round(m.stubs / MIB, 1),
        "after_load_mib": round(m.after_load / MIB, 1), "empty_server_mib": round(baseline / MIB, 1),
        "error_pct": round(100 * (estimate - m.total) / m.total, 1),
        "model_estimate_mib": round(model_estimate / MIB, 1),
        "model_measured_mib": round((m.total - baseline) / MIB, 1),
    }  # fmt: skip


def comparison_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| served model | variant | estimate MiB | measured MiB (server + stubs) | error | "
        "model part: estimate / measured MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['served_as']} | {r['variant']} | {r['estimate_mib']:.1f} | {r['measured_mib']:.1f} "
            f"({r['server_mib']:.1f} + {r['stubs_mib']:.1f}) | {r['error_pct']:+.1f}% | "
            f"{r['model_estimate_mib']:.1f} / {r['model_measured_mib']:.1f} |"
        )
    return "\n".join(lines) + "\n"
