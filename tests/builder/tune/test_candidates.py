"""Candidates come from the spec and never leave its profile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.spec import load_spec
from builder.targets import get
from builder.tune.candidates import (
    Candidate,
    apply,
    apply_to_spec,
    equivalence_key,
    of_spec,
    runner_spins,
    search_space,
    valid,
    within,
)

ROOT = Path(__file__).parents[3]


@pytest.fixture(scope="module")
def zoo():  # type: ignore[no-untyped-def]
    return load_spec(ROOT / "models.yaml")


def test_space_respects_the_profile_and_the_ensemble(zoo) -> None:  # type: ignore[no-untyped-def]
    space = search_space(zoo, "resnet18", cpus=2, budget_ms=1000)
    # the profile's max batch is 32 and the resnet18_image ensemble needs 32: nothing else
    assert space.max_batch_sizes == (32,)
    assert all(max(p, default=0) <= 32 for p in space.preferred)
    assert (8,) in space.preferred  # the profile's opt_batch
    assert max(space.instances) <= 3


def test_space_of_a_model_without_ensemble_spans_opt_to_max(zoo) -> None:  # type: ignore[no-untyped-def]
    space = search_space(zoo, "simple", cpus=2, budget_ms=5)
    assert space.max_batch_sizes == (1, 2, 4, 8)
    assert all(d < 5000 for d in space.delays_us)  # a delay at or over the budget is never proposed
    assert any("dropped" in n for n in space.notes)


def test_every_candidate_of_the_space_is_valid(zoo) -> None:  # type: ignore[no-untyped-def]
    space = search_space(zoo, "simple", cpus=2, budget_ms=100)
    for mb in space.max_batch_sizes:
        for pref in space.preferred:
            cand = Candidate(1, 0, pref, mb)
            assert valid(zoo, "simple", cand) == within(space, cand)


def test_apply_validates(zoo) -> None:  # type: ignore[no-untyped-def]
    model = zoo.model("resnet18")
    tuned = apply(model, Candidate(2, 500, (8, 16), 32))
    assert tuned.instances.count == 2 and tuned.batching.max_queue_delay_us == 500
    assert tuned.batching.queue == model.batching.queue  # the rest of batching is kept
    with pytest.raises(ValueError):
        apply(model, Candidate(1, 0, (64,), 32))  # preferred above max batch
    with pytest.raises(ValueError):
        apply_to_spec(zoo, "resnet18", Candidate(1, 0, (), 16))  # below the ensemble's 32
    assert of_spec(apply(model, Candidate(3, 0, (8,), 32))) == Candidate(3, 0, (8,), 32)


def test_equivalence_under_the_load_levels() -> None:
    a, b = Candidate(1, 0, (), 16), Candidate(1, 0, (8,), 32)
    assert equivalence_key(a, 4) == equivalence_key(b, 4)
    assert equivalence_key(a, 8) != equivalence_key(b, 8)


def test_label_and_dict_show_spinning_only_when_set() -> None:
    assert Candidate(1, 0, (), 8).label == "i1 d0 p[-] mb8"
    assert Candidate(1, 0, (), 8, spinning=True).label == "i1 d0 p[-] mb8 spin"
    assert Candidate(2, 500, (4,), 8, spinning=False).label == "i2 d500 p[4] mb8 nospin"
    assert Candidate(1, 0, (), 8, spinning=False).to_dict()["spinning"] is False
    assert Candidate(1, 0, (), 8).to_dict()["spinning"] is None


def test_spinning_is_searched_where_the_onnx_runner_serves(zoo) -> None:  # type: ignore[no-untyped-def]
    assert search_space(zoo, "simple", cpus=2, budget_ms=100).spinning == (True, False)  # served here: local
    assert search_space(zoo, "simple", cpus=2, budget_ms=100, target=get("local")).spinning == (True, False)
    assert search_space(zoo, "simple", cpus=2, budget_ms=100, target=get("cpu")).spinning == ()


def test_spinning_goes_from_the_spec_and_back(zoo) -> None:  # type: ignore[no-untyped-def]
    model = zoo.model("resnet18")
    assert of_spec(model).spinning is None
    tuned = apply(model, Candidate(2, 0, (), 32, spinning=False))
    assert tuned.target_options("local") == {"spinning": False} and tuned.serve == model.serve
    assert of_spec(tuned).spinning is False
    assert apply(tuned, of_spec(model)).targets is None


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 16])
def test_unset_spinning_is_the_runners_rule(cores: int) -> None:
    """Unset, the runner spins only where instances x threads leave one of the cores free."""
    one, two = Candidate(1, 0, (), 8, threads=1), Candidate(2, 0, (), 8, threads=1)
    assert runner_spins(one, cores) is (cores > 1) and runner_spins(two, cores) is (cores > 2)
    assert not runner_spins(Candidate(1, 0, (), 8), cores)  # unset threads take every core
    assert runner_spins(Candidate(1, 0, (), 8, spinning=True), cores)


def test_unset_spinning_is_equivalent_to_what_the_runner_does_here() -> None:
    one, two = Candidate(1, 0, (), 8, threads=1), Candidate(2, 0, (), 8, threads=1)
    for cand in (one, two):
        same = dataclasses.replace(cand, spinning=runner_spins(cand))
        other = dataclasses.replace(cand, spinning=not runner_spins(cand))
        assert equivalence_key(cand, 8) == equivalence_key(same, 8)
        assert equivalence_key(cand, 8) != equivalence_key(other, 8)
