"""``dtype: auto``: which candidate dtype to serve, from each one's verdict and measured speed.

A pure function of the verify stage's findings, so that the rule is tested without an engine:
the fastest candidate that verified; within ``TIE_MARGIN`` of each other, the earlier one in
``AUTO_CANDIDATES`` (the more exact); none verified, none chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builder.spec.llm import LLMDType

# Two speeds this close are one speed: timings on a shared 2-core machine vary by a few percent.
TIE_MARGIN = 0.05


@dataclass(frozen=True)
class Candidate:
    """One dtype's finding. ``skipped`` says why it was not run (then ``passed`` is False)."""

    dtype: LLMDType
    passed: bool
    tokens_per_second: float | None = None  # None: not measured
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype.value,
            "passed": self.passed,
            "tokens_per_second": self.tokens_per_second,
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Candidate:
        tps = raw.get("tokens_per_second")
        skipped = raw.get("skipped")
        return cls(
            LLMDType(str(raw["dtype"])),
            bool(raw["passed"]),
            None if tps is None else float(tps),
            None if skipped is None else str(skipped),
        )

    def label(self) -> str:
        speed = f" ({self.tokens_per_second:.0f} tok/s)" if self.tokens_per_second is not None else ""
        return f"{self.dtype.value}{speed}"


@dataclass(frozen=True)
class Choice:
    dtype: LLMDType | None  # None: no candidate verified
    reason: str  # one line, e.g. "dtype bfloat16 (312 tok/s) over float32 (268 tok/s), both verified"


def choose(candidates: list[Candidate]) -> Choice:
    """The fastest candidate that verified, ties to the earlier one; ``candidates`` in
    ``AUTO_CANDIDATES`` order."""
    passed = [c for c in candidates if c.passed]
    others = "; ".join(_why_not(c) for c in candidates if not c.passed)
    if not passed:
        return Choice(None, f"no dtype verified: {others}")
    best = passed[0]
    for c in passed[1:]:
        if _faster(c, best):
            best = c
    rest = [c for c in passed if c is not best]
    if not rest:
        return Choice(
            best.dtype, f"dtype {best.label()}, the only one verified" + (f" ({others})" if others else "")
        )
    runner = max(rest, key=lambda c: c.tokens_per_second or 0.0)
    verified = "both verified" if len(passed) == 2 else "all verified"
    tie = "" if _faster(best, runner) else f", within {TIE_MARGIN:.0%}: the more exact one"
    return Choice(best.dtype, f"dtype {best.label()} over {runner.label()}, {verified}{tie}")


def _faster(a: Candidate, b: Candidate) -> bool:
    """``a`` beats ``b`` by more than the margin (an unmeasured one beats nothing)."""
    if a.tokens_per_second is None:
        return False
    if b.tokens_per_second is None:
        return True
    return a.tokens_per_second > b.tokens_per_second * (1.0 + TIE_MARGIN)


def _why_not(c: Candidate) -> str:
    return f"{c.dtype.value} skipped: {c.skipped}" if c.skipped else f"{c.dtype.value} out of tolerance"
