"""The int8 stage (builder/stages/int8.py): the INT8 search on a real (tiny) model, its record, and
its cache key."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.stages.base import run_stage
from builder.stages.int8 import INT8
from builder.stages.int8_ranges import INT8_RANGES
from tests.builder.stages.jobs import referenced_job

pytestmark = pytest.mark.slow  # exports and quantizes the tiny model


def test_the_first_configuration_that_verifies_is_kept_and_a_rebuild_searches_nothing(
    tiny_project: Path,
) -> None:
    made = referenced_job(tiny_project)
    run_stage(made, INT8_RANGES)
    result = run_stage(made, INT8)
    found = result.info["search"]
    assert isinstance(found, dict)
    assert found["verified"] and found["float_nodes"] == [] and len(found["trials"]) == 1
    trial = found["trials"][0]
    assert trial["passed"] and trial["samples"] == 32 and not trial["symmetric"]  # asymmetric first
    assert any(key.startswith("onnxruntime y") for key in trial["figures"])
    assert "onnxruntime" in found["speed_ms"] and "fp32" in found["speed_ms"]["onnxruntime"]
    assert str(found["line"]).startswith(f"search: {trial['method']} asymmetric, every node quantized")
    assert "note" not in result.info  # the opset conversion's, where there was one

    again = referenced_job(tiny_project)
    run_stage(again, INT8_RANGES)
    assert run_stage(again, INT8).skipped
    tighter = {"fp32": {"min_cosine": 0.9999}, "fp16": {"min_cosine": 0.999}, "int8": {"min_cosine": 0.96}}
    changed = referenced_job(tiny_project, tolerances=tighter)
    assert run_stage(changed, INT8_RANGES).skipped  # the calibration does not depend on the tolerance
    assert not run_stage(changed, INT8).skipped  # the search does


def test_a_tolerance_nothing_meets_is_said_with_the_closest_configuration(tiny_project: Path) -> None:
    impossible = {"fp32": {"min_cosine": 0.9999}, "fp16": {"min_cosine": 0.999}, "int8": {"max_abs": 0.0}}
    calibration = {"data": "data/calib.npz", "method": "minmax", "search": {"max_trials": 5}}
    made = referenced_job(tiny_project, tolerances=impossible, calibration=calibration)
    run_stage(made, INT8_RANGES)
    result = run_stage(made, INT8)
    found = result.info["search"]
    assert isinstance(found, dict) and not found["verified"]
    trials = found["trials"]
    # half the budget for the methods, then 1, 2, ... nodes in float (at most all but one)
    assert [t["float_nodes"] for t in trials[:2]] == [0, 0] and 2 < len(trials) <= 5
    assert [t["float_nodes"] for t in trials[2:]] == sorted(t["float_nodes"] for t in trials[2:])
    assert str(found["line"]).startswith(f"search: none verified after {len(trials)} trials")
    assert "(closest: " in str(found["line"])
    assert (result.out / "model.onnx").is_file()  # the verify stage says why it is not published


def test_no_search_makes_the_spec_methods_graph_alone(tiny_project: Path) -> None:
    calibration = {"data": "data/calib.npz", "method": "minmax", "search": {"max_trials": 0}}
    made = referenced_job(tiny_project, calibration=calibration)
    ranges = run_stage(made, INT8_RANGES)
    assert "candidates" not in ranges.info
    result = run_stage(made, INT8)
    assert "search" not in result.info and (result.out / "model.onnx").is_file()
