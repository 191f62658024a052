"""Lanes in the vllm_engine model (utils/lanes.py): the ``lanes`` parameter parsed, a request routed
to its lane's engine, and each engine's CPUs placed."""

from __future__ import annotations

import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils.lanes import FOLDED_PRIORITY


def test_lanes_route_by_prompt_plus_max_tokens() -> None:
    rules = m.parse_lanes('[{"name": "huge", "min_tokens": 1000}, {"name": "long", "min_tokens": 200}]')
    assert [r.name for r in rules] == ["default", "long", "huge"]
    assert [rules[m.route(rules, n // 2, n - n // 2)].name for n in (1, 199, 200, 999, 1000, 5000)] == [
        "default", "default", "long", "long", "huge", "huge",
    ]  # fmt: skip
    assert m.parse_lanes("") == [m.LaneRule("default")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "parameter lanes: "),
        ('[{"name": "x", "min_tokens": 5, "colour": 1}]', "unexpected keyword argument 'colour'"),
        ('[{"name": "default", "min_tokens": 5}]', "not 'default'"),
        ('[{"name": "x", "min_tokens": 0}]', "thresholds must be >= 1, got"),
    ],
)
def test_bad_lanes_parameter(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        m.parse_lanes(text)


def test_a_long_lane_takes_a_request_whose_max_tokens_or_whose_prompt_reaches_its_threshold() -> None:
    # As the spec's lanes say: max_tokens >= min_max_tokens, or prompt >= min_prompt_tokens.
    rules = m.parse_lanes('[{"name": "long", "min_max_tokens": 300, "min_prompt_tokens": 500}]')
    cases = {
        (10, 299): "default",
        (10, 300): "long",
        (499, 100): "default",
        (500, 1): "long",
        (450, 250): "default",
    }
    assert {case: rules[m.route(rules, *case)].name for case in cases} == cases
    only_prompt = m.parse_lanes('[{"name": "long", "min_prompt_tokens": 500}]')
    assert only_prompt[m.route(only_prompt, 10, 5000)].name == "default"


def test_a_lane_needs_a_threshold() -> None:
    with pytest.raises(ValueError, match="needs min_tokens, min_max_tokens or min_prompt_tokens"):
        m.parse_lanes('[{"name": "long", "max_num_seqs": 2}]')


def test_each_lane_engine_gets_cpus_of_its_own_beside_the_servers() -> None:
    rules = m.parse_lanes('[{"name": "long", "min_max_tokens": 300}]')
    placed = m.place_lanes(rules, [0, 1, 2, 3, 4, 5, 6, 7])
    assert [(r.name, r.cpus, r.priority) for r in placed] == [("default", "0,1,2,3", 0), ("long", "4,5,6", 0)]
    unordered = m.place_lanes(rules, [4, 2, 3])  # sorted, the last one left to the server
    assert [(r.name, r.cpus) for r in unordered] == [("default", "2"), ("long", "3")]
    assert m.place_lanes(rules[:1], [0, 1]) == rules[:1]  # one engine: vLLM's own binding


def test_lanes_fold_into_the_default_engine_where_cpus_are_too_few() -> None:
    rules = m.parse_lanes('[{"name": "long", "min_max_tokens": 300}]')
    placed = m.place_lanes(rules, [0, 1])  # two engines and the server need three
    assert [(r.name, r.cpus, r.shares_default) for r in placed] == [
        ("default", None, False),
        ("long", None, True),
    ]
    assert placed[1].priority == FOLDED_PRIORITY > 0  # after the default lane's (lower runs first)
    assert "long run(s) on the default engine at lower priority" in m.placement_note(placed, 2)
    assert m.placement_note(m.place_lanes(rules, [0, 1, 2]), 3) == "lanes: default on CPUs 0, long on CPUs 1"


def test_lanes_that_name_their_cpus_or_priority_are_kept_as_written() -> None:
    pinned = m.parse_lanes('[{"name": "long", "min_max_tokens": 300, "cpus": "1"}]')
    assert m.place_lanes(pinned, [0, 1]) == pinned
    folded = m.parse_lanes('[{"name": "long", "min_max_tokens": 300, "priority": 5}]')
    assert m.place_lanes(folded, list(range(16))) == folded and folded[1].shares_default
