"""The engine step of the pipeline: plans for every model of the gpu target.

Without TensorRT or a GPU it says in one line which plans were skipped and why,
and the build goes on (unless engines are required).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from builder.engines.detect import TensorRTAvailability, detect
from builder.engines.metadata import metadata_path, read_metadata, sha256
from builder.engines.options import cc_model_filenames
from builder.engines.plan import EngineResult, Evaluation, Status, plan_engines, wanted_precisions
from builder.errors import UserError
from builder.spec import ModelSpec, Precision

if TYPE_CHECKING:
    from builder.pipeline import BuildContext, ModelBuild


class EnginesRequired(UserError):
    """``--require-engines`` and some plan was not built."""


@dataclass
class EngineSet:
    availability: TensorRTAvailability
    results: dict[str, list[EngineResult]] = field(default_factory=dict)
    served: dict[str, Precision] = field(default_factory=dict)  # the CPU stages' choice
    named: dict[str, Precision] = field(default_factory=dict)  # serve.gpu in the spec
    cc_files: dict[str, dict[str, str]] = field(default_factory=dict)  # cc_model_filenames per model
    onnx_hashes: dict[str, set[str]] = field(default_factory=dict)  # of each model's variants now
    previous_repository: Path | None = None  # the published one, whose other-GPU plans are kept

    @property
    def key(self) -> str:
        """Changes whenever an installed plan would change (for the repository key)."""
        parts = [self.availability.reason]
        for model, results in sorted(self.results.items()):
            parts += [f"{model}:{r.precision.value}:{r.status.value}:{_plan_hash(r)}" for r in results]
        return "|".join(parts)

    def chosen(self, model: str) -> EngineResult | None:
        """The verified plan to serve: the one ``serve.gpu`` names, else the fastest measured
        (INT8 is not always faster: strongly typed, every layer without Q/DQ runs in FP32)."""
        return choose_plan(self.results.get(model, []), self.named.get(model), self.served.get(model))

    def install(self, model: str, model_dir: Path) -> dict[str, str]:
        """Copy the chosen plan and its metadata into ``model_dir/1``, with the plans the published
        repository holds for the other compute capabilities of ``cc_model_filenames``;
        {relative path: sha256}."""
        version = model_dir / "1"
        installed: list[Path] = []
        result = self.chosen(model)
        if result is not None and result.plan is not None:
            installed.append(result.plan)
        if self.previous_repository is not None:
            here = result.plan.name if result is not None and result.plan is not None else None
            installed += kept_plans(
                self.previous_repository / model_dir.name / "1",
                self.cc_files.get(model, {}),
                self.onnx_hashes.get(model, set()),
                skip=here,
            )
        artifacts = {}
        for plan in installed:
            version.mkdir(parents=True, exist_ok=True)
            shutil.copy2(plan, version / plan.name)
            shutil.copy2(metadata_path(plan), version / metadata_path(plan).name)
            artifacts[f"{model_dir.name}/1/{plan.name}"] = sha256(version / plan.name)
        return artifacts

    def problems(self) -> list[str]:
        return [
            f"{r.model} {r.precision.value}: {r.message}"
            for results in self.results.values()
            for r in results
            if r.status is Status.FAILED
        ]


def kept_plans(
    previous: Path, cc_files: dict[str, str], onnx_hashes: set[str], skip: str | None
) -> list[Path]:
    """Plans of the previous repository's version folder for the other compute capabilities
    (built on another GPU, so not checkable here): kept when their metadata matches the file,
    its compute capability and an ONNX variant of the model as it is now."""
    kept = []
    for cc, name in sorted(cc_files.items()):
        plan = previous / name
        meta = read_metadata(plan) if name != skip and plan.is_file() else None
        if meta is None or meta.plan_sha256 != sha256(plan) or meta.compute_capability != cc:
            continue
        if meta.onnx_sha256 in onnx_hashes:
            kept.append(plan)
    return kept


def choose_plan(
    results: list[EngineResult], named: Precision | None, fallback: Precision | None = None
) -> EngineResult | None:
    """The named precision's verified plan, else the fastest measured one, else (nothing measured)
    ``fallback``'s, then INT8, FP16, FP32."""
    ok = {r.precision: r for r in results if r.ok}
    if named in ok:
        return ok[named]
    timed = [(ms, r.precision.value, r) for r in ok.values() if (ms := _ms_per_sample(r)) is not None]
    if timed:
        return min(timed, key=lambda t: (t[0], t[1]))[2]
    order = [fallback, Precision.INT8, Precision.FP16, Precision.FP32]
    return next((ok[p] for p in order if p in ok), None)


def _ms_per_sample(result: EngineResult) -> float | None:
    meta = read_metadata(result.plan) if result.plan is not None else None
    return meta.ms_per_sample if meta is not None else None


def skip_message(models: Iterable[ModelSpec], availability: TensorRTAvailability) -> str:
    """One line: which plans were not built here and why."""
    plans = [f"{m.name} ({', '.join(p.value for p in wanted_precisions(m))})" for m in models]
    return f"engines: skipped TensorRT plans for {', '.join(plans) or 'no models'}: {availability.reason}"


def build_all(
    builds: list[ModelBuild],
    ctx: BuildContext,
    *,
    require: bool,
    if_stale: bool = True,
    availability: TensorRTAvailability | None = None,
) -> EngineSet:
    found = availability or detect()
    engines = EngineSet(
        found,
        served={b.spec.name: b.served for b in builds if b.served is not None},
        named={b.spec.name: b.spec.serve.gpu for b in builds if b.spec.serve.gpu is not None},
        cc_files={b.spec.name: cc_model_filenames(b.spec.engine) for b in builds},
    )
    if not found.available:
        message = skip_message((b.spec for b in builds), found)
        if require:
            raise EnginesRequired(message + " (--require-engines)")
        ctx.log(message)
        return engines
    root = ctx.cache.root
    for b in builds:
        if engines.cc_files[b.spec.name]:  # only then are other GPUs' plans kept (and checked)
            engines.onnx_hashes[b.spec.name] = {sha256(v) for v in b.variants.values() if v.is_file()}
        engines.results[b.spec.name] = plan_engines(
            b.spec,
            b.variants,
            b.calibration_table,
            root / b.spec.name / "engines",
            root / "tensorrt",
            evaluation=_evaluation(b),
            precisions=[p for p in wanted_precisions(b.spec) if p in b.passed],
            availability=found,
            if_stale=if_stale,
        )
        _log_results(engines.results[b.spec.name], ctx.log)
    problems = engines.problems()
    if require and problems:
        raise EnginesRequired("; ".join(problems))
    return engines


def _evaluation(b: ModelBuild) -> Evaluation:
    ref = next(s.out for s in b.stages if s.name == "reference")
    with np.load(ref / "inputs.npz", allow_pickle=False) as i, np.load(ref / "reference.npz") as r:
        return Evaluation({k: i[k] for k in i.files}, {k: r[k] for k in r.files})


def _log_results(results: list[EngineResult], log: Callable[[str], None]) -> None:
    for r in results:
        log(
            f"[{r.model}] engine {r.precision.value}: {r.status.value}"
            + (f": {r.message}" if r.message else "")
        )


def _plan_hash(result: EngineResult) -> str:
    return sha256(result.plan) if result.plan is not None and result.plan.is_file() else "-"
