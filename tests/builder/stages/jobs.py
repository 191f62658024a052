"""A model job of the tiny project with its graph exported, checked and its reference made: what the
stages after them (int8, size) start from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from builder.cache import StageCache
from builder.records import BuildContext
from builder.sources import source_of
from builder.spec import load_spec
from builder.stages.base import ModelJob, run_stage
from builder.stages.check import CHECK
from builder.stages.export import EXPORT
from builder.stages.reference import REFERENCE


def referenced_job(project: Path, **changes: Any) -> ModelJob:
    """The project's first model (with ``changes`` written into its spec entry) through export, check
    and reference."""
    spec_file = project / "models.yaml"
    if changes:
        raw = yaml.safe_load(spec_file.read_text())
        raw["models"][0].update(changes)
        spec_file.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_file)
    ctx = BuildContext(
        spec, spec_file, project, StageCache(project / "cache", lambda _: None), lambda _: None
    )
    made = ModelJob(spec.models[0], ctx, source_of(spec.models[0]))
    for stage in (EXPORT, CHECK, REFERENCE):
        run_stage(made, stage)
    return made
