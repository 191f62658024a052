"""The table ``tritonforge build`` prints at the end."""

from __future__ import annotations

import sys
from pathlib import Path

from builder.records import BuildResult, LLMBuild, ModelBuild, VerificationReport

HEADERS = ("model", "served", "variants published", "verification (worst output)", "size", "build time")


CHECKS = HEADERS.index("verification (worst output)")


def render(result: BuildResult) -> str:
    """The table (one line per variant's check, so it stays within 120 columns), the logs that
    stages wrote third-party output to, and where the repository is."""
    rows = [line for b in result.models for line in _lines(_row(b))]
    rows += [line for lb in result.llms for line in _lines(_llm_row(lb))]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    logs = stage_logs(result)
    if logs:
        lines.append("third-party output of the stages that ran: " + ", ".join(str(p) for p in logs))
    state = "published" if result.published else "unchanged"
    lines.append(f"{result.target} repository {result.repo} ({state}) in {result.seconds:.1f} s")
    return "\n".join(lines)


def report_left_out(result: BuildResult) -> int:
    """One line on stderr for each model the build left out; the exit status: 2 if any, else 0."""
    for gone in result.left_out:
        print(f"error: {gone.error.one_line()} (left out of the repository)", file=sys.stderr)
    return 2 if result.left_out else 0


def stage_logs(result: BuildResult) -> list[Path]:
    stages = [s for b in result.models for s in b.stages] + [s for lb in result.llms for s in lb.stages]
    return sorted(log for s in stages if not s.skipped and s.out.is_dir() for log in s.out.glob("*.log"))


def _lines(row: tuple[str, ...]) -> list[tuple[str, ...]]:
    """A row whose checks cell lists several variants becomes one line per variant."""
    checks = row[CHECKS].split("; ")
    blank = tuple("" for _ in row)
    return [(*row[:CHECKS], checks[0], *row[CHECKS + 1 :])] + [
        (*blank[:CHECKS], c, *blank[CHECKS + 1 :]) for c in checks[1:]
    ]


def _row(b: ModelBuild) -> tuple[str, ...]:
    served = b.served.name if b.served else "-"
    published = ", ".join(v.name for v in b.passed)
    checks = "; ".join(_metric(report) for report in b.reports.values())
    size = b.variants[b.served].stat().st_size if b.served else 0
    skipped = all(s.skipped for s in b.stages)
    took = "unchanged" if skipped else f"{b.seconds:.1f} s"
    return (b.spec.name, served, published, checks, _mib(size), took)


def _llm_row(lb: LLMBuild) -> tuple[str, ...]:
    v = lb.verdict
    mark = "ok" if v.passed else "FAILED"
    checks = f"{v.dtype.value} {mark} agree {v.agreement:.2f} gap {v.mean_logprob_gap:.3f}"
    size = sum(p.stat().st_size for p in lb.checkpoint.rglob("*") if p.is_file())
    took = "unchanged" if all(s.skipped for s in lb.stages) else f"{lb.seconds:.1f} s"
    return (lb.spec.name, v.dtype.value, "llm (vLLM)", checks, _mib(size), took)


def _metric(report: VerificationReport) -> str:
    mark = "ok" if report.passed else "FAILED"
    computed = f" ({report.computed_in})" if report.computed_in and report.passed else ""
    moves = "" if report.batch_invariant else " alone"  # its answer moves with batch mates
    return f"{report.variant.name} {mark} {report.worst()}{computed}{moves}".strip()


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"
