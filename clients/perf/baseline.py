"""The regression gate: compare a sweep with an earlier JSON report."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from clients.perf.errors import PerfError
from clients.perf.report import PerfReport


@dataclass(frozen=True)
class Margins:
    """Allowed change before a point counts as a regression (fractions: 0.10 = 10 %)."""

    throughput_drop: float = 0.10
    p99_rise: float = 0.20


def compare(current: PerfReport, baseline: PerfReport, margins: Margins = Margins()) -> list[str]:
    """One line per regression; an empty list means the gate passes."""
    if current.model != baseline.model:
        raise PerfError(f"baseline is for model '{baseline.model}', not '{current.model}'")
    old = {(p.load, p.value): p for p in baseline.points}
    common = [p for p in current.points if (p.load, p.value) in old]
    if not common:
        raise PerfError("the baseline has none of this sweep's load points; run the same sweep")
    problems = []
    for p in common:
        b = old[(p.load, p.value)]
        where = f"{p.load} {p.value:g}"
        if _finite(b.throughput, p.throughput) and p.throughput < b.throughput * (
            1 - margins.throughput_drop
        ):
            problems.append(
                f"{where}: throughput {p.throughput:.1f}/s fell below {b.throughput:.1f}/s "
                f"by {_pct(b.throughput - p.throughput, b.throughput)} (margin {margins.throughput_drop:.0%})"
            )
        if _finite(b.p99_ms, p.p99_ms) and p.p99_ms > b.p99_ms * (1 + margins.p99_rise):
            problems.append(
                f"{where}: p99 {p.p99_ms:.2f} ms rose above {b.p99_ms:.2f} ms "
                f"by {_pct(p.p99_ms - b.p99_ms, b.p99_ms)} (margin {margins.p99_rise:.0%})"
            )
    return problems


def check(current: PerfReport, baseline_file: Path, margins: Margins = Margins()) -> list[str]:
    if not Path(baseline_file).is_file():
        raise PerfError(f"baseline file not found: {baseline_file}")
    try:
        baseline = PerfReport.load(baseline_file)
    except (ValueError, KeyError, TypeError) as exc:
        raise PerfError(f"{baseline_file} is not a perf JSON report: {exc}") from exc
    return compare(current, baseline, margins)


def _finite(*values: float) -> bool:
    return all(v is not None and math.isfinite(v) and v > 0 for v in values)


def _pct(diff: float, base: float) -> str:
    return f"{diff / base:.1%}"
