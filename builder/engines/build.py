"""The engine step of the pipeline: plans for every model of the gpu target.

Without TensorRT or a GPU it says in one line which plans were skipped and why,
and the build goes on (unless engines are required).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.engines.detect import TensorRTAvailability, detect
from builder.engines.metadata import metadata_path, sha256
from builder.engines.plan import EngineResult, Evaluation, Status, plan_engines, wanted_precisions
from builder.errors import UserError
from builder.records import EngineSummary, InstalledPlan, Log
from builder.spec import ModelSpec, Precision


class EnginesRequired(UserError):
    """``--require-engines`` and some plan was not built."""


@dataclass(frozen=True)
class EngineInput:
    """One model's verified CPU variants, which the plans are built from and checked against."""

    spec: ModelSpec
    variants: dict[Precision, Path]
    passed: list[Precision]
    served: Precision | None
    calibration_table: Path | None
    reference_dir: Path  # inputs.npz and reference.npz of the evaluation set


@dataclass
class EngineSet:
    availability: TensorRTAvailability
    results: dict[str, list[EngineResult]] = field(default_factory=dict)
    served: dict[str, Precision] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Changes whenever an installed plan would change (for the repository key)."""
        parts = [self.availability.reason]
        for model, results in sorted(self.results.items()):
            parts += [f"{model}:{r.precision.value}:{r.status.value}:{_plan_hash(r)}" for r in results]
        return "|".join(parts)

    def chosen(self, model: str) -> EngineResult | None:
        """The verified plan to serve: the served variant's, else the best other one."""
        ok = {r.precision: r for r in self.results.get(model, []) if r.ok}
        order = [self.served.get(model), Precision.INT8, Precision.FP16, Precision.FP32]
        return next((ok[p] for p in order if p in ok), None)

    def summary(self) -> EngineSummary:
        """The plan to install per model, for the repository writer."""
        plans: dict[str, InstalledPlan] = {}
        for model in self.results:
            result = self.chosen(model)
            if result is not None and result.plan is not None:
                plans[model] = InstalledPlan(result.precision, result.plan, metadata_path(result.plan))
        skipped = None if self.availability.available else self.availability.reason
        return EngineSummary(self.key, plans, skipped)

    def problems(self) -> list[str]:
        return [
            f"{r.model} {r.precision.value}: {r.message}"
            for results in self.results.values()
            for r in results
            if r.status is Status.FAILED
        ]


def skip_message(models: Iterable[ModelSpec], availability: TensorRTAvailability) -> str:
    """One line: which plans were not built here and why."""
    plans = [f"{m.name} ({', '.join(p.value for p in wanted_precisions(m))})" for m in models]
    return f"engines: skipped TensorRT plans for {', '.join(plans) or 'no models'}: {availability.reason}"


def build_all(
    models: list[EngineInput],
    cache_root: Path,
    log: Log,
    *,
    require: bool,
    if_stale: bool = True,
    availability: TensorRTAvailability | None = None,
) -> EngineSet:
    found = availability or detect()
    engines = EngineSet(found, served={m.spec.name: m.served for m in models if m.served is not None})
    if not found.available:
        message = skip_message((m.spec for m in models), found)
        if require:
            raise EnginesRequired(message + " (--require-engines)")
        log(message)
        return engines
    for m in models:
        engines.results[m.spec.name] = plan_engines(
            m.spec,
            m.variants,
            m.calibration_table,
            cache_root / m.spec.name / "engines",
            cache_root / "tensorrt",
            evaluation=_evaluation(m.reference_dir),
            precisions=[p for p in wanted_precisions(m.spec) if p in m.passed],
            availability=found,
            if_stale=if_stale,
        )
        _log_results(engines.results[m.spec.name], log)
    problems = engines.problems()
    if require and problems:
        raise EnginesRequired("; ".join(problems))
    return engines


def _evaluation(ref: Path) -> Evaluation:
    with np.load(ref / "inputs.npz", allow_pickle=False) as i, np.load(ref / "reference.npz") as r:
        return Evaluation({k: i[k] for k in i.files}, {k: r[k] for k in r.files})


def _log_results(results: list[EngineResult], log: Log) -> None:
    for r in results:
        log(
            f"[{r.model}] engine {r.precision.value}: {r.status.value}"
            + (f": {r.message}" if r.message else "")
        )


def _plan_hash(result: EngineResult) -> str:
    return sha256(result.plan) if result.plan is not None and result.plan.is_file() else "-"
