"""The size stage (builder/stages/size.py): every sizing measured as served, once per host."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.spec import Variant
from builder.stages import size
from builder.stages.base import run_stage
from builder.stages.check import CHECK
from tests.builder.stages.jobs import referenced_job

pytestmark = pytest.mark.slow  # exports the tiny model


def test_each_sizing_is_measured_and_the_best_allowed_serves(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(size, "C1_SECONDS", 0.02)
    monkeypatch.setattr(size, "C8_SECONDS", 0.02)
    made = referenced_job(tiny_project)
    sizings = [Sizing(1, Knobs(threads=2)), Sizing(2, Knobs(threads=1))]
    stage = size.Size(Variant.parse("fp32"), made.graph(CHECK.name), sizings, [False, True], alone=False)
    result = run_stage(made, stage)
    report = size.Size.report(Variant.parse("fp32"), result.info)
    assert [p.sizing for p in report.points] == sizings
    assert all(p.c1_ms > 0 and p.c8_rows_per_s > 0 for p in report.points)
    assert report.chosen.sizing == sizings[1]  # the only one allowed
    again = run_stage(made, stage)
    assert again.skipped and again.key == result.key  # measured once per host


def test_a_call_holds_the_rows_asked_for(tiny_project: Path) -> None:
    made = referenced_job(tiny_project)
    samples = {"x": np.arange(6 * 16, dtype=np.float32).reshape(6, 16)}
    assert size.feed(made.model, samples, 8)["x"].shape == (8, 16)  # repeated where fewer
    assert size.feed(made.model, samples, 1)["x"].shape == (1, 16)
