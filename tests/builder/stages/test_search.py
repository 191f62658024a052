"""builder.stages.search: the INT8 search's order, its exponential-then-bisection and its budget,
with a fake trial in place of a model."""

from __future__ import annotations

import pytest

from builder.errors import ModelRefused
from builder.stages.quantize import Int8Config
from builder.stages.search import Budget, Outcome, Ranked, fewest, search

NODES = [Ranked(f"n{i}", "Conv", 1.0 / (i + 1)) for i in range(20)]
MINMAX = Int8Config("minmax")
METHODS = [MINMAX, Int8Config("minmax", symmetric=False), Int8Config("percentile 99.99")]


def needs(k: int, calls: list[int]) -> object:
    def passes(n: int) -> bool:
        calls.append(n)
        return n >= k

    return passes


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13, 19])
def test_fewest_finds_the_least_count_that_passes_in_logarithmic_trials(k: int) -> None:
    calls: list[int] = []
    assert fewest(20, needs(k, calls)) == k  # type: ignore[arg-type]
    assert len(calls) <= 2 * 5 + 1  # doubling to 2^5 > 19, then bisecting below it
    assert calls[: len(calls)] and calls[0] == 1


def test_fewest_never_keeps_every_node_in_float() -> None:
    calls: list[int] = []
    assert fewest(20, needs(20, calls)) is None  # type: ignore[arg-type]
    assert max(calls) == 19
    assert fewest(1, lambda n: True) is None  # one node: nothing can stay in float


def fake(passing: set[Int8Config] | None = None, k: int | None = None, seen: list[Int8Config] | None = None):  # type: ignore[no-untyped-def]
    """A trial: ``passing`` configurations verify, and any with at least ``k`` nodes in float."""

    def run(config: Int8Config) -> Outcome:
        if seen is not None:
            seen.append(config)
        ok = config in (passing or set()) or (k is not None and len(config.float_nodes) >= k)
        margin = 0.1 if ok else -1.0 + 0.01 * len(config.float_nodes) + (0.5 if not config.symmetric else 0.0)
        return Outcome(ok, margin)

    return run


def test_the_first_method_that_verifies_is_kept_and_nothing_after_it_is_tried() -> None:
    seen: list[Int8Config] = []
    result = search(METHODS, fake({METHODS[1]}, seen=seen), lambda c: NODES, Budget(10, 60))
    assert result.chosen == METHODS[1]
    assert seen == METHODS[:2]
    assert not result.ranking  # no ranking needed


def test_without_a_method_the_closest_one_keeps_its_worst_nodes_in_float() -> None:
    ranked: list[Int8Config] = []

    def rank(config: Int8Config) -> list[Ranked]:
        ranked.append(config)
        return NODES

    result = search(METHODS, fake(k=6), rank, Budget(50, 60))
    assert ranked == [METHODS[1]]  # asymmetric came closest
    assert result.chosen == METHODS[1].with_float(tuple(n.name for n in NODES[:6]))
    counts = [len(t.config.float_nodes) for t in result.trials[len(METHODS) :]]
    assert counts == [1, 2, 4, 8, 6, 5]
    assert result.best() is not None and result.best().config == result.chosen  # type: ignore[union-attr]


def test_the_budget_stops_the_search_and_keeps_what_verified_so_far() -> None:
    result = search(METHODS, fake(k=6), lambda c: NODES, Budget(max_trials=7, max_seconds=60))
    assert len(result.trials) == 7
    assert result.exhausted
    assert result.chosen is not None and len(result.chosen.float_nodes) == 8  # 1, 2, 4 failed; 8 passed


def test_the_budget_in_seconds() -> None:
    now = [0.0]

    def run(config: Int8Config) -> Outcome:
        now[0] += 10.0
        return fake(k=6)(config)  # type: ignore[no-any-return]

    result = search(METHODS, run, lambda c: NODES, Budget(100, 45, clock=lambda: now[0]))
    assert len(result.trials) == 5  # 0, 10, 20, 30, 40 s: the sixth would start at 50
    assert result.exhausted and result.chosen is None


def test_a_refused_configuration_is_a_failed_trial_that_says_why() -> None:
    def run(config: Int8Config) -> Outcome:
        if not config.symmetric:
            raise ModelRefused("ONNX Runtime cannot load int8.onnx: bad graph")
        return fake({METHODS[2]})(config)  # type: ignore[no-any-return]

    result = search(METHODS, run, lambda c: NODES, Budget(10, 60))
    assert result.chosen == METHODS[2]
    refused = result.trials[1]
    assert refused.outcome is None and refused.refused and "cannot load" in refused.refused
    assert refused.to_json()["passed"] is False


def test_nothing_verifies_within_the_ranking() -> None:
    result = search(METHODS, fake(), lambda c: NODES[:3], Budget(50, 60))
    assert result.chosen is None and not result.exhausted
    assert [len(t.config.float_nodes) for t in result.trials[3:]] == [1, 2]
