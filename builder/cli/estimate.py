"""``tritonforge estimate``: memory per model and variant against the GPU (or host) memory.

With ``--measure`` the CPU estimate of each served model is checked against the resident
memory of the real server (tritonserver plus its Python-backend stubs) with that model
loaded alone, after one request at the profile's max shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from builder.estimate.plan import GIB, MIB, Row, advise, core_rows, python_row, table
from builder.spec import ModelSpec, Precision, Spec, load_spec


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "estimate", help="memory plan per model and variant; warns when it does not fit"
    )
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--gpu-memory", type=float, default=None, help="GPU memory in GiB (checks the gpu plan)")
    p.add_argument("--host-memory", type=float, default=None, help="host memory in GiB (default: this host)")
    p.add_argument("--measure", action="store_true", help="check the CPU estimate against the real server")
    p.add_argument("--out", type=Path, default=None, help="write estimate.json / estimate.md here")
    p.set_defaults(func=run)
    return p  # type: ignore[no-any-return]


def host_memory() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def plan(spec: Spec, repo: Path) -> list[Row]:
    """Rows for every core model (each variant, cpu and gpu) and every Python model."""
    manifest = json.loads((repo / "manifest.json").read_text())
    rows: list[Row] = []
    for model in spec.models:
        entry = manifest["models"][model.name]
        served = Precision(entry["served"])
        graphs = {Precision(p): repo / name / "1" / "model.onnx" for name, p in entry["published"].items()}
        rows += core_rows(model, graphs, served)
    rows += [python_row(pm) for pm in spec.python_models]
    return rows


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
    from builder.estimate.rss import measure

    served = served_models(spec, repo)
    baseline, measured = measure(repo, {n: m for n, (m, _) in served.items()}, log=log or (lambda _: None))
    out = []
    for m in measured:
        model, variant = served[m.model]
        row = next(r for r in rows if r.model == model.name and r.variant == variant and r.device == "cpu")
        error = (row.total - m.total) / m.total
        out.append({
            "served_as": m.model, "model": model.name, "variant": variant,
            "estimate_mib": round(row.total / MIB, 1), "measured_mib": round(m.total / MIB, 1),
            "server_mib": round(m.server / MIB, 1), "stubs_mib": round(m.stubs / MIB, 1),
            "after_load_mib": round(m.after_load / MIB, 1), "empty_server_mib": round(baseline / MIB, 1),
            "error_pct": round(100 * error, 1),
            "model_estimate_mib": round(row.model_bytes / MIB, 1),
            "model_measured_mib": round((m.total - baseline) / MIB, 1),
        })  # fmt: skip
    return out


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


def run(args: argparse.Namespace) -> int:
    from builder.tune.measure import build_local

    spec_file = args.spec.resolve()
    spec = load_spec(spec_file)
    log = _log
    with tempfile.TemporaryDirectory(prefix="tritonforge-estimate-") as tmp:
        repo = build_local(spec_file, Path(tmp) / "repo", log=lambda _: None)
        rows = plan(spec, repo)
        models = {m.name: m for m in spec.models}
        print(table(rows))
        host = int(args.host_memory * GIB) if args.host_memory else host_memory()
        verdicts = advise(rows, host, "cpu", models)
        if args.gpu_memory is not None:
            verdicts += advise(rows, int(args.gpu_memory * GIB), "gpu", models)
        for line in verdicts:
            print(line)
        results = compare(rows, repo, spec, log) if args.measure else []
    if results:
        print()
        print(comparison_table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "estimate.json").write_text(
            json.dumps(
                {"rows": [r.to_dict() for r in rows], "verdicts": verdicts, "measured": results}, indent=1
            )
            + "\n"
        )
        (args.out / "estimate.md").write_text(
            table(rows) + "\n" + "\n".join(verdicts) + "\n\n" + (comparison_table(results) if results else "")
        )
    fits = all("DOES NOT FIT" not in v for v in verdicts)
    return 0 if fits else 3


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
