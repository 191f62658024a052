"""The INT8 search's logic, apart from any model: which configurations it tries, in which order,
within which budget, and which one it keeps (docs/quantization.md).

1. **Methods.** Each calibration method's all-INT8 graph (symmetric, then asymmetric where the
   runtime takes it) in the order given; the first that verifies is kept: they have the same
   layout, so the first is as fast as any.
2. **The fewest nodes in float.** Where none verifies, the method that came closest is kept, its
   quantized nodes are ranked by their measured error, and the ``k`` worst are kept in float for the
   least ``k`` that verifies: ``k`` = 1, 2, 4, ... until one verifies, then bisection between the
   last that failed and the first that verified.

A trial is a callable from a configuration to an :class:`Outcome`; here it is only called, so the
logic is tested with a fake one. The budget (``max_trials``, ``max_seconds``) bounds the trials; the
best configuration found so far is kept when it runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from builder.errors import ModelRefused
from builder.stages.quantize import Int8Config


@dataclass(frozen=True)
class Outcome:
    """A trial's verdict: passed, how far inside (or outside) the tolerance its worst figure is, its
    figures and failures, and on how many evaluation samples it was judged."""

    passed: bool
    margin: float
    figures: dict[str, float] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    samples: int = 0


@dataclass(frozen=True)
class Trial:
    config: Int8Config
    outcome: Outcome | None  # None: the graph could not be made or run (``refused`` says why)
    seconds: float
    refused: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome is not None and self.outcome.passed

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "method": self.config.method,
            "symmetric": self.config.symmetric,
            "float_nodes": len(self.config.float_nodes),
            "passed": self.passed,
            "seconds": round(self.seconds, 2),
        }
        if self.outcome is not None:
            out |= {"figures": self.outcome.figures, "samples": self.outcome.samples}
            out |= {"failures": list(self.outcome.failures)} if self.outcome.failures else {}
        if self.refused:
            out["refused"] = self.refused
        return out


@dataclass(frozen=True)
class Ranked:
    """A quantized node and its measured error (higher: worse)."""

    name: str
    op_type: str
    score: float


@dataclass
class Budget:
    """At most ``max_trials`` trials and ``max_seconds`` from the first; ``clock`` for tests."""

    max_trials: int
    max_seconds: float
    clock: Callable[[], float] = time.perf_counter
    used: int = 0
    started: float | None = None

    def left(self) -> bool:
        if self.started is None:
            self.started = self.clock()
        return self.used < self.max_trials and self.clock() - self.started < self.max_seconds

    def spend(self) -> None:
        self.used += 1


@dataclass
class SearchResult:
    """What the search tried and what it keeps: ``chosen`` verified (None: nothing did within the
    budget); ``base`` is the method it settled on, all-INT8; ``ranking`` the nodes by their error."""

    trials: list[Trial] = field(default_factory=list)
    chosen: Int8Config | None = None
    base: Int8Config | None = None
    ranking: list[Ranked] = field(default_factory=list)
    exhausted: bool = False  # the budget ran out before the search was done

    def best(self) -> Trial | None:
        """The passing trial kept, else the trial that came closest."""
        if self.chosen is not None:
            return next(t for t in reversed(self.trials) if t.config == self.chosen and t.passed)
        judged = [t for t in self.trials if t.outcome is not None]
        return max(judged, key=lambda t: t.outcome.margin if t.outcome else float("-inf"), default=None)


Run = Callable[[Int8Config], Outcome]
Rank = Callable[[Int8Config], list[Ranked]]


def search(methods: Sequence[Int8Config], run: Run, rank: Rank, budget: Budget) -> SearchResult:
    """The configuration to keep: the first of ``methods`` that verifies, else the best of them with
    the fewest of its ranked nodes in float that verifies (module docstring)."""
    result = SearchResult()

    def attempt(config: Int8Config) -> Trial | None:
        if not budget.left():
            result.exhausted = True
            return None
        budget.spend()
        start = time.perf_counter()
        try:
            outcome, refused = run(config), None
        except ModelRefused as exc:  # a graph ONNX Runtime's quantizer or a runtime refuses
            outcome, refused = None, str(exc).splitlines()[0][:300]
        trial = Trial(config, outcome, time.perf_counter() - start, refused)
        result.trials.append(trial)
        return trial

    for config in methods:
        trial = attempt(config)
        if trial is None:
            return result
        if trial.passed:
            result.chosen = result.base = config
            return result
    judged = [t for t in result.trials if t.outcome is not None]
    if not judged:
        return result
    base = max(judged, key=lambda t: t.outcome.margin if t.outcome else float("-inf")).config
    result.base = base
    result.ranking = rank(base)
    names = tuple(r.name for r in result.ranking)
    k = fewest(len(names), lambda n: _passes(attempt(base.with_float(names[:n]))))
    if k is not None:
        result.chosen = base.with_float(names[:k])
    return result


class _OutOfBudget(Exception):
    pass


def _passes(trial: Trial | None) -> bool:
    if trial is None:
        raise _OutOfBudget
    return trial.passed


def fewest(count: int, passes: Callable[[int], bool]) -> int | None:
    """The least ``k`` in 1..``count`` - 1 for which ``passes(k)``, assuming that keeping more in
    float never hurts: 1, 2, 4, ... up to the first that passes, then bisection below it. At least
    one node stays quantized (``count`` - 1 at most: a graph without Q/DQ is no INT8 graph). None
    when none passes, or the budget ran out before one did (the least found so far otherwise)."""
    top = count - 1
    if top < 1:
        return None
    failed, passed = 0, None
    k = 1
    try:
        while passed is None:
            if passes(k):
                passed = k
            else:
                failed = k
                if k >= top:
                    return None
                k = min(2 * k, top)
        while passed - failed > 1:
            mid = (failed + passed) // 2
            if passes(mid):
                passed = mid
            else:
                failed = mid
    except _OutOfBudget:
        pass
    return passed
