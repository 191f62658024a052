"""The engine stage of the pipeline: plans for every model of a target that builds engines.

Without TensorRT or a GPU it says in one line which plans were skipped and why,
and the build goes on (unless engines are required).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.engines.detect import TensorRTAvailability, detect
from builder.engines.metadata import Fingerprint, PlanMetadata, metadata_path, read_metadata, sha256
from builder.engines.plan import EngineResult, Evaluation, Status, plan_engines, wanted_precisions
from builder.engines.profiles import profile_shapes
from builder.errors import UserError
from builder.records import EngineSummary, InstalledPlan, Log
from builder.spec import ModelSpec, Precision
from builder.spec.engine import cc_model_filenames


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
    named: Precision | None = None  # the one precision the spec names for the gpu target (its plan)


@dataclass
class EngineSet:
    availability: TensorRTAvailability
    results: dict[str, list[EngineResult]] = field(default_factory=dict)
    served: dict[str, Precision] = field(default_factory=dict)  # the CPU stages' choice
    named: dict[str, Precision] = field(default_factory=dict)  # targets.gpu.serve in the spec
    cc_files: dict[str, dict[str, str]] = field(default_factory=dict)  # cc_model_filenames per model
    profile_counts: dict[str, int] = field(default_factory=dict)  # profiles each model's config lists
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

    def summary(self) -> EngineSummary:
        """The plans to install per model for the repository writer: the chosen one first, then
        those the published repository holds for the other compute capabilities of
        ``cc_model_filenames``."""
        plans: dict[str, list[InstalledPlan]] = {}
        for model in self.results:
            plans[model] = [InstalledPlan(p, metadata_path(p)) for p in self._installed(model)]
        skipped = None if self.availability.available else self.availability.reason
        return EngineSummary(self.key, {m: p for m, p in plans.items() if p}, skipped)

    def _installed(self, model: str) -> list[Path]:
        result = self.chosen(model)
        here = result.plan if result is not None else None
        installed = [here] if here is not None else []
        if self.previous_repository is not None:
            installed += kept_plans(
                self.previous_repository / model / "1",
                self.cc_files.get(model, {}),
                Loadable(
                    self.availability,
                    {r.precision.value: r.fingerprint for r in self.results.get(model, []) if r.fingerprint},
                    self.profile_counts.get(model, 0),
                ),
                skip=here.name if here is not None else None,
            )
        return installed

    def problems(self) -> list[str]:
        return [
            f"{r.model} {r.precision.value}: {r.message}"
            for results in self.results.values()
            for r in results
            if r.status is Status.FAILED
        ]


@dataclass(frozen=True)
class Loadable:
    """What a plan built on another GPU must match to be served beside this build's: the
    TensorRT (and its CUDA build) the server loads plans with, what a plan of its precision is
    built from now (ONNX and options), and the number of profiles the config lists."""

    here: TensorRTAvailability
    fingerprints: dict[str, Fingerprint]  # precision -> as built here now
    profile_count: int

    def why_not(self, meta: PlanMetadata, cc: str) -> str | None:
        expected = self.fingerprints.get(meta.precision)
        if meta.compute_capability != cc:
            return f"built for {meta.compute_capability}, listed for {cc}"
        if (meta.tensorrt_version, meta.tensorrt_cuda) != (self.here.version, self.here.cuda):
            return f"built with TensorRT {meta.tensorrt_version} {meta.tensorrt_cuda}".rstrip()
        if expected is None:
            return f"no {meta.precision} plan was verified here to compare its options with"
        if (meta.onnx_sha256, meta.options_sha256) != (expected.onnx_sha256, expected.options_sha256):
            return "built from another ONNX or with other options"
        if meta.profile_count != self.profile_count:
            return f"{meta.profile_count} profiles; the config lists {self.profile_count}"
        return None


def kept_plans(previous: Path, cc_files: dict[str, str], loadable: Loadable, skip: str | None) -> list[Path]:
    """Plans of the previous repository's version folder for the other compute capabilities
    (built on another GPU, so not run here): kept when their metadata matches the file and
    the server could load them as the config says (:class:`Loadable`)."""
    kept = []
    for cc, name in sorted(cc_files.items()):
        plan = previous / name
        meta = read_metadata(plan) if name != skip and plan.is_file() else None
        if meta is None or meta.plan_sha256 != sha256(plan):
            continue
        if loadable.why_not(meta, cc) is None:
            kept.append(plan)
    return kept


TIE = 1.05  # plans within 5 % of the fastest are as fast: measurement noise on a shared GPU
EXACTNESS = [Precision.FP32, Precision.FP16, Precision.INT8]  # among equals, the least lossy


def choose_plan(
    results: list[EngineResult], named: Precision | None, fallback: Precision | None = None
) -> EngineResult | None:
    """The named precision's verified plan, else the fastest measured one (among plans within
    :data:`TIE` of it, the most exact), else (nothing measured) ``fallback``'s, then INT8, FP16,
    FP32."""
    ok = {r.precision: r for r in results if r.ok}
    if named in ok:
        return ok[named]
    timed = {p: ms for p, r in ok.items() if (ms := _ms_per_sample(r)) is not None}
    if timed:
        fastest = min(timed.values())
        tied = [p for p, ms in timed.items() if ms <= fastest * TIE]
        return ok[min(tied, key=EXACTNESS.index)]
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
    models: list[EngineInput],
    cache_root: Path,
    log: Log,
    *,
    require: bool,
    if_stale: bool = True,
    availability: TensorRTAvailability | None = None,
    previous_repository: Path | None = None,
) -> EngineSet:
    found = availability or detect()
    engines = EngineSet(
        found,
        served={m.spec.name: m.served for m in models if m.served is not None},
        named={m.spec.name: m.named for m in models if m.named is not None},
        cc_files={m.spec.name: cc_model_filenames(m.spec.engine) for m in models},
        profile_counts={m.spec.name: len(profile_shapes(m.spec)) for m in models},
        previous_repository=previous_repository,
    )
    if not found.available:
        message = skip_message((m.spec for m in models), found)
        if require:
            raise EnginesRequired(message + " (--require-engines)")
        log(message)
        return engines
    root = engine_root(cache_root, found)
    with one_builder(root) if root != cache_root else contextlib.nullcontext():
        for m in models:
            engines.results[m.spec.name] = plan_engines(
                m.spec,
                m.variants,
                m.calibration_table,
                root / m.spec.name / "engines",
                root / "tensorrt",
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


ENGINE_CACHE_ENV = "TRITONFORGE_ENGINE_CACHE"


def engine_root(cache_root: Path, found: TensorRTAvailability) -> Path:
    """Where plans and the timing cache go: the stage cache, or with ``TRITONFORGE_ENGINE_CACHE``
    (a volume every pod mounts) that folder's subfolder for this GPU model and TensorRT build,
    so that pods on other GPUs neither replace nor rebuild each other's plans."""
    shared = os.environ.get(ENGINE_CACHE_ENV)
    if not shared or found.gpu is None or found.version is None:
        return cache_root
    gpu = re.sub(r"[^a-z0-9]+", "-", found.gpu.name.lower()).strip("-")
    cc = found.gpu.compute_capability.replace(".", "")
    return Path(shared) / "-".join(p for p in (gpu, f"sm{cc}", f"trt{found.version}", found.cuda) if p)


@contextlib.contextmanager
def one_builder(root: Path) -> Iterator[None]:
    """Pods sharing the engine cache that start together on one GPU model build one at a time
    (they would share each plan's staging folder); the next one finds the plans fresh."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
