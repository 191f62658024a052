"""The size stage (builder/stages/size.py): every sizing measured as served, once per host."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.cache import StageCache
from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.records import BuildContext
from builder.sources import source_of
from builder.spec import Variant, load_spec
from builder.stages import size
from builder.stages.base import ModelJob, run_stage
from builder.stages.check import CHECK
from builder.stages.export import EXPORT
from builder.stages.reference import REFERENCE

pytestmark = pytest.mark.slow  # exports the tiny model


def job(project: Path) -> ModelJob:
    spec_file = project / "models.yaml"
    spec = load_spec(spec_file)
    ctx = BuildContext(
        spec, spec_file, project, StageCache(project / "cache", lambda _: None), lambda _: None
    )
    made = ModelJob(spec.models[0], ctx, source_of(spec.models[0]))
    for stage in (EXPORT, CHECK, REFERENCE):
        run_stage(made, stage)
    return made


def test_each_sizing_is_measured_and_the_best_allowed_serves(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(size, "C1_SECONDS", 0.02)
    monkeypatch.setattr(size, "C8_SECONDS", 0.02)
    made = job(tiny_project)
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
    made = job(tiny_project)
    samples = {"x": np.arange(6 * 16, dtype=np.float32).reshape(6, 16)}
    assert size.feed(made.model, samples, 8)["x"].shape == (8, 16)  # repeated where fewer
    assert size.feed(made.model, samples, 1)["x"].shape == (1, 16)
