"""The tuning report: every candidate (measured or pruned), the chosen one, the side-by-side
check against the spec's default, and a plot of throughput against p99 latency."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from builder.tune.candidates import Candidate, runner_spins
from builder.tune.search import SearchResult, Trial
from clients.perf.report import json_safe


def _best(t: Trial, budget: float) -> str:
    b = t.best(budget)
    return f"{b.throughput:.1f} /s @ c={b.concurrency}, p99 {b.p99_ms:.1f} ms" if b else "–"


def _spins(cand: Candidate) -> str:
    how = "spinning" if runner_spins(cand) else "sleeping"
    return how if cand.spinning is not None else f"{how} (unset: spin only with a core to spare)"


def spinning_line(result: SearchResult) -> str:
    """What the chosen and the default do with ONNX Runtime's idle workers, when it was searched."""
    if all(t.candidate.spinning is None for t in result.trials):
        return ""
    return (
        f"Idle intra-op workers (targets.local.spinning): chosen {_spins(result.chosen.candidate)}, "
        f"spec default {_spins(result.default.candidate)}"
    )


def table(result: SearchResult) -> str:
    head = "| # | candidate | status | points (c: infer/s, p99 ms) | best within budget | note |"
    lines = [head, "|---:|---|---|---|---|---|"]
    for i, t in enumerate(result.trials, 1):
        pts = "; ".join(f"{p.concurrency}: {p.throughput:.1f}, {p.p99_ms:.0f}" for p in t.points) or "–"
        mark = " **chosen**" if t is result.chosen else ""
        lines.append(
            f"| {i} | `{t.candidate.label}`{mark} | {t.status} | {pts} | {_best(t, result.budget_ms)} "
            f"| {t.reason} |"
        )
    return "\n".join(lines) + "\n"


def markdown(
    result: SearchResult, model: str, confirm: dict[str, Any] | None, diff: str, meta: dict[str, Any]
) -> str:
    measured = len(result.measured)
    pruned = sum(t.status == "pruned" for t in result.trials)
    out = [
        f"# Tuning `{model}` for p99 <= {result.budget_ms:g} ms",
        "",
        f"Candidates: {measured} measured, {pruned} pruned; {meta.get('seconds', 0):.0f} s "
        f"of a {meta.get('budget_minutes', 0):g} min budget. {result.stopped}".rstrip(),
        "",
        f"Chosen: `{result.chosen.candidate.label}` — {_best(result.chosen, result.budget_ms)}",
        f"Spec default: `{result.default.candidate.label}` — {_best(result.default, result.budget_ms)}",
    ]
    if spinning_line(result):
        out.append(spinning_line(result))
    out += ["", table(result)]
    for note in meta.get("notes", []):
        out.append(f"- {note}")
    if confirm:
        out += ["", "## Side by side, one server run (interleaved per concurrency level)", ""]
        out += [
            "| config | best infer/s | at concurrency | p99 ms |",
            "|---|---:|---:|---:|",
        ]
        for key in ("default", "chosen"):
            b = confirm[key]
            out.append(
                f"| {key} `{b['label']}` | {b['throughput']:.1f} | {b['concurrency']} | {b['p99_ms']:.1f} |"
            )
        out += [
            "",
            f"Throughput ratio chosen/default: **{confirm['throughput_ratio']:.2f}**; "
            f"p99 ratio: **{confirm['p99_ratio']:.2f}**."
            + ("" if meta.get("confirmed", True) else " Not confirmed: the patch is not applied."),
        ]
    if diff:
        out += ["", "## Patch to models.yaml", "", "```diff", diff.rstrip(), "```"]
    return "\n".join(out) + "\n"


def plot(result: SearchResult, model: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for t in result.measured:
        if not t.points:
            continue
        style: dict[str, Any] = {"linewidth": 2.5, "zorder": 3} if t is result.chosen else {"alpha": 0.6}
        if t is result.default:
            style["linestyle"] = "--"
        xs = [p.p99_ms for p in t.points]
        ys = [p.throughput for p in t.points]
        ax.plot(xs, ys, marker="o", label=t.candidate.label, **style)
    ax.axvline(result.budget_ms, color="red", linestyle=":", label=f"p99 budget {result.budget_ms:g} ms")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title(f"{model}: candidates, throughput vs p99 (points = concurrency levels)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def to_json(result: SearchResult) -> dict[str, Any]:
    def trial(t: Trial) -> dict[str, Any]:
        b = t.best(result.budget_ms)
        return {
            "candidate": t.candidate.to_dict(), "label": t.candidate.label, "status": t.status,
            "reason": t.reason, "seconds": round(t.seconds, 1), "points": [asdict(p) for p in t.points],
            "best": asdict(b) if b else None,
        }  # fmt: skip

    out: dict[str, Any] = json_safe({
        "budget_ms": result.budget_ms, "stopped": result.stopped,
        "default": trial(result.default), "chosen": trial(result.chosen),
        "trials": [trial(t) for t in result.trials],
    })  # fmt: skip
    return out


def write(
    result: SearchResult,
    model: str,
    out: Path,
    confirm: dict[str, Any] | None,
    diff: str,
    meta: dict[str, Any],
) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"md": out / "report.md", "json": out / "tune.json", "png": out / "throughput_vs_p99.png"}
    files["md"].write_text(markdown(result, model, confirm, diff, meta))
    record = {"model": model, **meta, **to_json(result), "confirm": json_safe(confirm)}
    files["json"].write_text(json.dumps(record, indent=1) + "\n")
    plot(result, model, files["png"])
    if diff:
        files["diff"] = out / "models.yaml.diff"
        files["diff"].write_text(diff)
    return {k: str(v) for k, v in files.items()}
