"""The search logic against a synthetic server: pruning, stop rules, never outside the profile."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest

from builder.errors import BuildError
from builder.tune.candidates import Candidate, SearchSpace, runner_spins, within
from builder.tune.search import Limits, Point, Trial, search, side_by_side, sweep
from clients.perf.errors import UnstableError

SPACE = SearchSpace(
    instances=(1, 2, 3),
    delays_us=(0, 500, 2000),
    preferred=((), (4,), (4, 8)),
    max_batch_sizes=(8, 16),
    min_batch=8,
    max_batch=16,
)
DEFAULT = Candidate(1, 0, (), 16)


class FakeServer:
    """Throughput peaks at 2 instances and rises with queue delay; latency grows with load."""

    def __init__(self) -> None:
        self.calls: list[tuple[Candidate, int]] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self, cand: Candidate, c: int) -> Point:
        self.calls.append((cand, c))
        self.now += 10.0
        per_req_ms = {1: 10.0, 2: 7.0, 3: 9.0}[cand.instances] * (0.8 if cand.max_queue_delay_us else 1.0)
        if cand.preferred_batch_sizes:
            per_req_ms *= 0.95
        throughput = 1000.0 / per_req_ms * min(c, 4) ** 0.5
        p99 = per_req_ms * c * 1.5 + cand.max_queue_delay_us / 1000.0
        return Point(c, throughput, p99 / 1.5, p99)


def test_search_finds_the_best_within_budget_and_stays_in_the_profile() -> None:
    fake = FakeServer()
    result = search(SPACE, DEFAULT, fake, 60.0, limits=Limits(concurrency=(1, 2, 4, 8)), clock=fake.clock)
    chosen = result.chosen.candidate
    assert chosen.instances == 2
    assert chosen.max_queue_delay_us > 0
    assert result.chosen.best(60.0) is not None
    assert all(within(SPACE, cand) for cand, _ in fake.calls)
    for cand, _ in fake.calls:
        assert cand.max_batch_size in SPACE.max_batch_sizes
        assert all(s <= cand.max_batch_size for s in cand.preferred_batch_sizes)
    grid = len(SPACE.instances) * len(SPACE.delays_us) * len(SPACE.preferred) * len(SPACE.max_batch_sizes)
    assert len(result.measured) < grid / 3  # far fewer than a full grid


def test_sweep_stops_once_p99_passes_the_budget() -> None:
    fake = FakeServer()
    trial = sweep(DEFAULT, fake, 40.0, Limits(concurrency=(1, 2, 4, 8, 16)))
    assert [c for _, c in fake.calls] == [1, 2, 4]  # p99 at 4 is 60 ms > 40: no 8, no 16
    assert "over budget" in trial.reason
    assert trial.best(40.0) is not None and trial.best(40.0).concurrency == 2


def test_sweep_stops_when_it_cannot_beat_the_incumbent() -> None:
    fake = FakeServer()
    trial = sweep(DEFAULT, fake, 1000.0, Limits(concurrency=(1, 2)), incumbent=10_000.0)
    assert len(fake.calls) == 1 and "cannot win" in trial.reason


def test_sweep_stops_when_saturated() -> None:
    def flat(cand: Candidate, c: int) -> Point:
        return Point(c, 100.0, 1.0, 2.0)

    trial = sweep(DEFAULT, flat, 1000.0, Limits(concurrency=(1, 2, 4, 8)))
    assert len(trial.points) == 3 and "saturated" in trial.reason


def test_longer_delays_are_pruned_once_one_misses_at_the_lowest_concurrency() -> None:
    fake = FakeServer()
    space = SearchSpace((1,), (0, 500, 2000, 8000), ((),), (16,), 16, 16)
    result = search(space, DEFAULT, fake, 10.5, limits=Limits(concurrency=(1, 2)), clock=fake.clock)
    delays_measured = {cand.max_queue_delay_us for cand, _ in fake.calls}
    assert 8000 not in delays_measured  # 2000 missed at concurrency 1: 8000 never measured
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert any("already missed" in t.reason for t in pruned)


def test_equivalent_candidates_are_measured_once() -> None:
    fake = FakeServer()
    # concurrency <= 2: preferred sizes 4 and 8 can never form, max_batch 8 and 16 behave alike
    search(SPACE, DEFAULT, fake, 1000.0, limits=Limits(concurrency=(1, 2)), clock=fake.clock)
    measured = {cand for cand, _ in fake.calls}
    assert not any(c.preferred_batch_sizes for c in measured)
    assert {c.max_batch_size for c in measured} == {16}


def test_more_instances_pruned_after_one_loses() -> None:
    fake = FakeServer()
    space = SearchSpace((1, 2, 3, 4), (0,), ((),), (16,), 16, 16)

    def measure(cand: Candidate, c: int) -> Point:
        fake.calls.append((cand, c))
        return Point(c, {1: 100.0, 2: 50.0}.get(cand.instances, 500.0), 1.0, 1.0)

    result = search(space, DEFAULT, measure, 1000.0, limits=Limits(concurrency=(1,)))
    assert {c.instances for c, _ in fake.calls} == {1, 2}  # 3 and 4 pruned (and would have won)
    assert result.chosen.candidate.instances == 1


def test_time_budget_stops_the_search() -> None:
    fake = FakeServer()
    limits = Limits(concurrency=(1, 2), deadline_s=45.0)
    result = search(SPACE, DEFAULT, fake, 1000.0, limits=limits, clock=fake.clock)
    assert result.stopped == "time budget reached"
    assert fake.now <= 45.0 + 20.0  # at most the sweep that was running when time ran out


def test_a_challenger_must_beat_the_incumbent_by_the_noise_margin() -> None:
    def measure(cand: Candidate, c: int) -> Point:
        return Point(c, 103.0 if cand.instances == 2 else 100.0, 1.0, 1.0)

    space = SearchSpace((1, 2), (0,), ((),), (16,), 16, 16)
    result = search(space, DEFAULT, measure, 1000.0, limits=Limits(concurrency=(1,), min_gain=0.05))
    assert result.chosen.candidate == DEFAULT


def test_failed_default_leaves_the_search_going() -> None:
    def measure(cand: Candidate, c: int) -> Point:
        if cand == DEFAULT:
            raise UnstableError("unstable")
        return Point(c, 50.0, 1.0, 1.0)

    space = SearchSpace((1, 2), (0,), ((),), (16,), 16, 16)
    result = search(space, DEFAULT, measure, 1000.0, limits=Limits(concurrency=(1,)))
    assert result.default.status == "failed"
    assert result.chosen.candidate.instances == 2


def test_a_candidate_the_server_refuses_is_a_failed_trial() -> None:
    def measure(cand: Candidate, c: int) -> Point:
        if cand.instances == 2:
            raise BuildError("tiny [2 instances] did not load")
        return Point(c, 50.0, 1.0, 1.0)

    space = SearchSpace((1, 2), (0,), ((),), (16,), 16, 16)
    result = search(space, DEFAULT, measure, 1000.0, limits=Limits(concurrency=(1,)))
    (failed,) = [t for t in result.trials if t.status == "failed"]
    assert failed.reason == "BuildError: tiny [2 instances] did not load"


def test_an_unexpected_exception_while_measuring_is_a_defect_not_a_failed_trial() -> None:
    def measure(cand: Candidate, c: int) -> Point:
        raise KeyError("planted")

    space = SearchSpace((1, 2), (0,), ((),), (16,), 16, 16)
    with pytest.raises(KeyError, match="planted"):
        search(space, DEFAULT, measure, 1000.0, limits=Limits(concurrency=(1,)))
    with pytest.raises(KeyError, match="planted"):
        side_by_side(DEFAULT, DEFAULT, measure, 1000.0, (1,))


def test_best_ignores_points_after_a_miss() -> None:
    t = Trial(DEFAULT, "measured", points=[Point(1, 10, 1, 5), Point(2, 20, 1, 50), Point(4, 30, 1, 5)])
    assert t.best(10.0).throughput == 10


def test_side_by_side_reports_the_ratios() -> None:
    fake = FakeServer()
    chosen = Candidate(2, 500, (), 16)
    out = side_by_side(DEFAULT, chosen, fake, 40.0, (1, 2, 4))
    assert out["throughput_ratio"] > 1.0
    assert out["p99_ratio"] == pytest.approx(out["chosen"]["p99_ms"] / out["default"]["p99_ms"])
    assert math.isfinite(out["p99_ratio"])


def sleeping_wins(calls: list[Candidate]) -> Callable[[Candidate, int], Point]:
    """A ~1 ms model on a loaded machine: workers that sleep serve 1.5x faster."""

    def measure(cand: Candidate, c: int) -> Point:
        calls.append(cand)
        return Point(c, 1000.0 if runner_spins(cand) else 1500.0, 1.0, 2.0)

    return measure


@pytest.mark.parametrize("instances", [1, 2])
def test_spinning_is_tried_last_and_the_faster_chosen(instances: int) -> None:
    calls: list[Candidate] = []
    space = SearchSpace((instances,), (0,), ((),), (16,), 16, 16, spinning=(True, False))
    default = Candidate(instances, 0, (), 16, threads=1)
    result = search(space, default, sleeping_wins(calls), 10.0, limits=Limits(concurrency=(1,)))
    spins = runner_spins(default)  # unset: the runner's rule on this machine's cores
    if spins:  # the unset default spins: not spinning is measured and wins
        assert calls == [default, dataclasses.replace(default, spinning=False)]
        assert result.chosen.candidate.spinning is False
    else:  # the unset default already sleeps: spinning is measured and loses
        assert calls == [default, dataclasses.replace(default, spinning=True)]
        assert result.chosen.candidate == default
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert [t.candidate.spinning for t in pruned] == [spins]
    assert "equivalent to" in pruned[0].reason


def test_spinning_is_tried_on_top_of_the_winner_of_the_other_dimensions() -> None:
    calls: list[Candidate] = []
    sleeping = sleeping_wins(calls)

    def measure(cand: Candidate, c: int) -> Point:  # a queue delay also helps
        p = sleeping(cand, c)
        return dataclasses.replace(p, throughput=p.throughput * (2 if cand.max_queue_delay_us else 1))

    space = SearchSpace((1,), (0, 500), ((),), (16,), 16, 16, spinning=(True, False))
    result = search(space, DEFAULT, measure, 10.0, limits=Limits(concurrency=(1,)))
    delayed = Candidate(1, 500, (), 16)
    flipped = dataclasses.replace(delayed, spinning=not runner_spins(delayed))
    assert calls == [DEFAULT, delayed, flipped]
    assert result.chosen.candidate == (flipped if runner_spins(delayed) else delayed)  # sleeping wins


def test_no_spinning_values_where_the_target_has_none() -> None:
    calls: list[Candidate] = []
    search(SPACE, DEFAULT, sleeping_wins(calls), 1000.0, limits=Limits(concurrency=(1,)))
    assert calls and all(c.spinning is None for c in calls)
