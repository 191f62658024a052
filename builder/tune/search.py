"""The search: which candidates to measure, which to prune, when to stop a sweep.

Pure: measurement is a callable ``measure(candidate, concurrency) -> Point`` and time a
callable clock, so the whole logic runs in unit tests against a synthetic model.

Shape of the search (coordinate descent from the spec's own config, smarter than a grid):

1. The spec's default is measured first; it is the incumbent to beat.
2. One dimension at a time (instances, max batch size, preferred sizes, queue delay, then
   whether ONNX Runtime's idle workers spin, where the target has that setting), each value
   is tried with the other dimensions held at the incumbent's. A candidate wins when its best
   point within the budget has ``min_gain`` more throughput than the incumbent's.
3. Pruned without measuring:
   * values outside the profile (``within``/``is_valid``: never measured, never proposed);
   * candidates equivalent to one already measured (``equivalence_key``; spinning set to
     what the runner does unset, spin iff one instance, is the unset candidate);
   * a longer queue delay once a shorter one missed the budget at the lowest concurrency
     (a lone request waits the whole delay, so longer delays can only be slower);
   * more instances once a count lost to a smaller one (the cores are already shared);
   * anything that no longer fits in the time left.
4. A sweep over concurrency levels stops once p99 passes the budget (higher load only adds
   latency), once throughput stops rising for two levels (saturated), or once an upper bound on its
   throughput (``max concurrency / p50 at the first level``, closed loop) cannot beat the
   incumbent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from builder.errors import BuildError
from builder.tune.candidates import Candidate, SearchSpace, equivalence_key, within
from clients.perf.errors import PerfError

# What measuring raises for a candidate the server does not load or perf_analyzer cannot measure
# (or never sees stabilise): a failed trial. Anything else is a defect and fails the tune.
MEASURE_FAILURES = (BuildError, PerfError)

# Spinning last: which way wins depends on the load the winner of the others puts on the cores.
DIMENSIONS = ("instances", "max_batch_size", "preferred_batch_sizes", "max_queue_delay_us", "spinning")
BOUND_SLACK = 0.7  # mean latency under load is taken as at least 0.7x the p50 at the first level


@dataclass(frozen=True)
class Point:
    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p99_ms: float
    avg_batch: float = math.nan


@dataclass
class Trial:
    candidate: Candidate
    status: str  # "measured", "pruned", "failed"
    reason: str = ""
    points: list[Point] = field(default_factory=list)
    seconds: float = 0.0

    def best(self, budget_ms: float) -> Point | None:
        """The highest-throughput point within the budget (points after a miss do not count)."""
        ok: list[Point] = []
        for p in sorted(self.points, key=lambda p: p.concurrency):
            if not p.p99_ms <= budget_ms:
                break
            ok.append(p)
        return max(ok, key=lambda p: p.throughput, default=None)

    def score(self, budget_ms: float) -> float:
        best = self.best(budget_ms)
        return best.throughput if best else 0.0


@dataclass
class SearchResult:
    budget_ms: float
    default: Trial
    chosen: Trial
    trials: list[Trial]
    stopped: str = ""  # why the search ended before trying every dimension, if it did

    @property
    def measured(self) -> list[Trial]:
        return [t for t in self.trials if t.status == "measured"]


Measure = Callable[[Candidate, int], Point]


@dataclass(frozen=True)
class Limits:
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    deadline_s: float = math.inf  # clock value by which the search must be done
    min_gain: float = 0.05  # a challenger must beat the incumbent by this fraction (noise margin)
    saturation: float = 0.03  # a sweep stops when throughput rises by less than this
    worse_stop: float = 0.97  # more instances stop once one scores below this x incumbent


def sweep(
    cand: Candidate,
    measure: Measure,
    budget_ms: float,
    limits: Limits,
    incumbent: float = 0.0,
    clock: Callable[[], float] | None = None,
) -> Trial:
    """Measure ``cand`` at rising concurrency until a stop rule fires."""
    trial = Trial(cand, "measured")
    levels = sorted(set(limits.concurrency))
    start = clock() if clock else 0.0
    for c in levels:
        try:
            p = measure(cand, c)
        except MEASURE_FAILURES as exc:  # a candidate the server refuses or that errors under load
            trial.status, trial.reason = "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            break
        trial.points.append(p)
        if not p.p99_ms <= budget_ms:
            trial.reason = f"p99 {p.p99_ms:.1f} ms over budget at concurrency {c}: sweep stopped"
            break
        if len(trial.points) == 1 and incumbent > 0 and p.p50_ms > 0:
            bound = levels[-1] / (BOUND_SLACK * p.p50_ms / 1000.0)
            if bound <= incumbent:
                trial.reason = f"cannot win: at most {bound:.1f}/s (incumbent {incumbent:.1f}/s)"
                break
        if len(trial.points) >= 3 and all(
            q.throughput < max(x.throughput for x in trial.points[:-2]) * (1 + limits.saturation)
            for q in trial.points[-2:]
        ):  # two levels in a row without a gain over the best before them (one alone may be noise)
            trial.reason = f"saturated at concurrency {c}: sweep stopped"
            break
    if clock:
        trial.seconds = clock() - start
    return trial


def search(
    space: SearchSpace,
    default: Candidate,
    measure: Measure,
    budget_ms: float,
    *,
    limits: Limits = Limits(),
    is_valid: Callable[[Candidate], bool] = lambda _: True,
    clock: Callable[[], float] = lambda: 0.0,
) -> SearchResult:
    """Find the candidate with the highest throughput whose p99 meets ``budget_ms``."""
    max_c = max(limits.concurrency)
    first = sweep(default, measure, budget_ms, limits, clock=clock)
    first.reason = ("spec default; " + first.reason).rstrip("; ")
    trials = [first]
    seen = {equivalence_key(default, max_c): default}
    incumbent = first
    stopped = ""
    for dim in DIMENSIONS:
        if stopped:
            break
        lost_at: int | None = None  # instances: the count that lost
        missed_delay: int | None = None  # queue delay: shortest that missed at the lowest level
        base = incumbent.candidate
        for value in _values(space, dim):
            cand = dataclasses.replace(base, **{dim: value})  # type: ignore[arg-type]
            if cand == base:
                continue
            reason = _prune(cand, dim, space, seen, max_c, lost_at, missed_delay, is_valid)
            if reason:
                trials.append(Trial(cand, "pruned", reason))
                continue
            cost = _cost(trials, len(limits.concurrency))
            if clock() + cost > limits.deadline_s:
                trials.append(Trial(cand, "pruned", f"time budget: ~{cost:.0f} s needed"))
                stopped = "time budget reached"
                break
            seen[equivalence_key(cand, max_c)] = cand
            trial = sweep(cand, measure, budget_ms, limits, incumbent.score(budget_ms), clock)
            trials.append(trial)
            score, best = trial.score(budget_ms), incumbent.score(budget_ms)
            if score > best * (1 + limits.min_gain) or (best == 0 and score > 0):
                incumbent = trial
            elif dim == "instances" and cand.instances > base.instances and score < best * limits.worse_stop:
                lost_at = cand.instances
            if dim == "max_queue_delay_us" and trial.points and not trial.points[0].p99_ms <= budget_ms:
                delay = cand.max_queue_delay_us
                missed_delay = delay if missed_delay is None else min(missed_delay, delay)
    return SearchResult(budget_ms, first, incumbent, trials, stopped)


def _values(space: SearchSpace, dim: str) -> tuple[object, ...]:
    return {
        "instances": space.instances,
        "max_batch_size": space.max_batch_sizes,
        "preferred_batch_sizes": space.preferred,
        "max_queue_delay_us": space.delays_us,
        "spinning": space.spinning,
    }[dim]


def _prune(
    cand: Candidate,
    dim: str,
    space: SearchSpace,
    seen: dict[tuple[object, ...], Candidate],
    max_c: int,
    lost_at: int | None,
    missed_delay: int | None,
    is_valid: Callable[[Candidate], bool],
) -> str:
    if not within(space, cand) or not is_valid(cand):
        return "outside the profile or the spec's constraints"
    key = equivalence_key(cand, max_c)
    if key in seen:
        return f"equivalent to {seen[key].label} at concurrency <= {max_c}"
    if dim == "instances" and lost_at is not None and cand.instances > lost_at:
        return f"{lost_at} instances already lost; more only split the same cores further"
    if dim == "max_queue_delay_us" and missed_delay is not None and cand.max_queue_delay_us > missed_delay:
        return f"delay {missed_delay} us already missed the budget at the lowest concurrency"
    return ""


def _cost(trials: Sequence[Trial], levels: int) -> float:
    """Expected seconds for one more sweep: the mean measured seconds per point times levels."""
    points = sum(len(t.points) for t in trials if t.status != "pruned")
    seconds = sum(t.seconds for t in trials if t.status != "pruned")
    return seconds / points * levels if points else 0.0


def side_by_side(
    default: Candidate, chosen: Candidate, measure: Measure, budget_ms: float, levels: Sequence[int]
) -> dict[str, object]:
    """Both configs measured again in one run, interleaved per concurrency level (drift in a
    shared machine's load hits both alike); each stops once its p99 passes the budget."""
    trials = {"default": Trial(default, "measured"), "chosen": Trial(chosen, "measured")}
    for c in sorted(set(levels)):
        for trial in trials.values():
            if trial.points and not trial.points[-1].p99_ms <= budget_ms:
                continue
            try:
                trial.points.append(measure(trial.candidate, c))
            except MEASURE_FAILURES as exc:  # counted as a miss: that config stops here
                trial.status, trial.reason = "failed", f"{type(exc).__name__} at concurrency {c}"
                trial.points.append(Point(c, 0.0, math.inf, math.inf))
    out: dict[str, object] = {}
    for key, trial in trials.items():
        b = trial.best(budget_ms)
        out[key] = {
            "label": trial.candidate.label,
            "throughput": b.throughput if b else 0.0,
            "concurrency": b.concurrency if b else 0,
            "p99_ms": b.p99_ms if b else math.nan,
            "points": [dataclasses.asdict(p) for p in trial.points],
        }
    d, ch = out["default"], out["chosen"]
    assert isinstance(d, dict) and isinstance(ch, dict)
    out["throughput_ratio"] = ch["throughput"] / d["throughput"] if d["throughput"] else math.inf
    out["p99_ratio"] = ch["p99_ms"] / d["p99_ms"] if d["throughput"] and ch["throughput"] else math.nan
    return out
