"""Plans for one model: build each in the worker, verify, then keep it with its metadata.

Layout under ``out_dir`` (one model): ``<precision>/model.plan`` (or ``model.smXY.plan``
with ``cc_model_filenames``) and beside it ``.json`` (metadata), ``.repro.sh``
(the ``trtexec`` command) and ``.log`` (TensorRT's output).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from builder.engines.calibrator import with_header
from builder.engines.detect import TensorRTAvailability, detect
from builder.engines.isolate import run_worker
from builder.engines.metadata import (
    Fingerprint,
    PlanMetadata,
    fingerprint,
    metadata_path,
    sha256,
    stale_reason,
    verification_key,
    write_metadata,
)
from builder.engines.repro import write_repro
from builder.engines.request import PLAN_PRECISIONS, BuildRequest, RecipeError, make_request
from builder.engines.trt_runner import profiles_run
from builder.errors import SpecError, StageDefect
from builder.spec import ModelSpec, Precision
from builder.spec.engine import EngineOptions, plan_filename


class Status(str, Enum):
    BUILT = "built"  # built and verified now
    FRESH = "fresh"  # an earlier plan still fits this machine, model and options
    FAILED = "failed"
    SKIPPED = "skipped"  # no TensorRT or no GPU here


@dataclass(frozen=True)
class EngineResult:
    model: str
    precision: Precision
    status: Status
    message: str = ""
    plan: Path | None = None  # set only for a verified plan (BUILT or FRESH)
    fingerprint: Fingerprint | None = None  # what a plan of this precision is built from now

    @property
    def ok(self) -> bool:
        return self.status in (Status.BUILT, Status.FRESH)


@dataclass(frozen=True)
class Evaluation:
    """Evaluation inputs and the reference outputs the CPU variants are verified against."""

    inputs: Mapping[str, NDArray[Any]]
    reference: Mapping[str, NDArray[Any]]


def engine_options(model: ModelSpec) -> EngineOptions:
    raw: object = model.engine
    if isinstance(raw, EngineOptions):
        return raw
    try:
        return EngineOptions.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "engine." + ".".join(str(p) for p in err["loc"])
        raise SpecError(err["msg"], model=model.name, field=field) from None


def wanted_precisions(model: ModelSpec) -> list[Precision]:
    return [p for p in model.precisions if p in PLAN_PRECISIONS]


def plan_engines(
    model: ModelSpec,
    variants: dict[Precision, Path],
    calibration_table: Path | None,
    out_dir: Path,
    cache_dir: Path,
    *,
    evaluation: Evaluation,
    precisions: list[Precision] | None = None,
    availability: TensorRTAvailability | None = None,
    if_stale: bool = True,
) -> list[EngineResult]:
    """One verified plan per precision; ``if_stale`` keeps plans that still fit."""
    found = availability or detect()
    wanted = wanted_precisions(model) if precisions is None else precisions
    if not found.available:
        return [EngineResult(model.name, p, Status.SKIPPED, found.reason) for p in wanted]
    options = engine_options(model)
    job = _Job(model, options, variants, calibration_table, found, out_dir, cache_dir, evaluation)
    return [job.plan(p, if_stale) for p in wanted]


@dataclass
class _Job:
    model: ModelSpec
    options: EngineOptions
    variants: dict[Precision, Path]
    calibration_table: Path | None
    found: TensorRTAvailability
    out_dir: Path
    cache_dir: Path
    evaluation: Evaluation

    def plan(self, precision: Precision, if_stale: bool) -> EngineResult:
        assert self.found.gpu is not None and self.found.version is not None
        cc = self.found.gpu.compute_capability
        plan = self.out_dir / precision.value / plan_filename(self.options, cc)
        unmapped = self._unmapped(cc)
        if unmapped:
            return self._failed(precision, plan, unmapped)
        cache = self.cache_dir / f"timing-trt{self.found.version}-sm{cc.replace('.', '')}.cache"
        try:
            req = make_request(
                self.model,
                self.options,
                precision,
                self.variants,
                self.calibration_table,
                self.found.version,
                plan=plan,
                timing_cache=cache,
            )
        except RecipeError as exc:
            return self._failed(precision, plan, str(exc))
        if req.calibration_table is not None:
            req.calibration_table = str(self._headed_table(Path(req.calibration_table), plan))
        expected = self._expected(precision, req)
        if if_stale and stale_reason(plan, self.found, expected) is None:
            return EngineResult(self.model.name, precision, Status.FRESH, "up to date", plan, expected)
        return self._build(precision, req, plan)

    def _unmapped(self, cc: str) -> str | None:
        """Triton loads ``cc_model_filenames[cc]``, else ``default_model_filename``: a plan for
        a compute capability the list lacks would never be loaded."""
        listed = self.options.cc_model_filenames
        if not listed or cc in listed:
            return None
        assert self.found.gpu is not None
        return (
            f"engine.cc_model_filenames lists {', '.join(listed)} but this GPU ({self.found.gpu.name}) "
            f"is {cc}: Triton would look for model.plan and not load the model; add '{cc}' to the list"
        )

    def _expected(self, precision: Precision, req: BuildRequest) -> Fingerprint:
        tolerance = self.model.tolerances[precision].model_dump(mode="json")
        arrays = {f"input:{k}": v for k, v in self.evaluation.inputs.items()}
        arrays |= {f"reference:{k}": v for k, v in self.evaluation.reference.items()}
        return replace(fingerprint(req), verification_sha256=verification_key(tolerance, arrays))

    def _headed_table(self, table: Path, plan: Path) -> Path:
        """The CPU stage's table under this TensorRT's header, beside the plan (``trtexec --calib``
        in the reproduce script reads it too)."""
        assert self.found.version is not None
        out = plan.with_name("calibration.cache")
        data = with_header(table.read_bytes(), self.found.version)
        if not out.is_file() or out.read_bytes() != data:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        return out

    def _build(self, precision: Precision, req: BuildRequest, plan: Path) -> EngineResult:
        staging = plan.parent / ".staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        req.plan = str(staging / plan.name)
        req.eval_inputs = str(staging / "inputs.npz")
        req.eval_outputs = str(staging / "outputs.npz")
        req.eval_timing = str(staging / "timing.json")
        try:
            exercised = profiles_run(self.evaluation.inputs, req.batch_size, req.profiles)
        except ValueError as exc:
            return self._failed(
                precision, plan, f"the evaluation set cannot run on this plan: {exc}", staging
            )
        np.savez(req.eval_inputs, **dict(self.evaluation.inputs))
        (staging / "request.json").write_text(req.to_json(), encoding="utf-8")
        gpu = self.found.gpu
        assert gpu is not None
        repro = write_repro(
            req,
            plan,
            f"{self.model.name} {precision.value}: rebuilds this plan as tritonforge did "
            f"(TensorRT {self.found.version}, {gpu.name}, sm {gpu.compute_capability}); run it where "
            "trtexec is, e.g. the TensorRT or Triton container",
        )
        log = plan.with_name(plan.name + ".log")
        log.write_bytes(b"")
        outcome = run_worker(staging / "request.json", log, self.options.build_timeout_s)
        where = f"(log: {log}; reproduce: {repro})"
        if outcome.defect:
            shutil.rmtree(staging, ignore_errors=True)
            raise StageDefect(self.model.name, f"engine-{precision.value}", outcome.message, log)
        if not outcome.ok:
            return self._failed(precision, plan, f"{outcome.message} {where}", staging)
        failures, metrics = self._verify(precision, Path(req.eval_outputs))
        if failures:
            return self._failed(
                precision, plan, "the plan failed verification: " + "; ".join(failures), staging
            )
        timing = Path(req.eval_timing)
        timed = json.loads(timing.read_text(encoding="utf-8")) if timing.is_file() else {}
        metrics["timing"] = timed
        ms = timed.get("ms_per_sample")
        return self._keep(precision, req, plan, Path(req.plan), metrics, staging, exercised, ms)

    def _verify(self, precision: Precision, outputs_file: Path) -> tuple[list[str], dict[str, object]]:
        """The same comparison and tolerance as the CPU variants of this precision, for the
        outputs of every batch size the plan ran at (``"<batch>:<output>"`` keys)."""
        from builder.stages.verify import compare, decoding  # ONNX Runtime, only once a plan ran

        runs: dict[str, dict[str, NDArray[Any]]] = {}
        with np.load(outputs_file, allow_pickle=False) as data:
            for key in data.files:
                batch, _, name = key.rpartition(":")
                runs.setdefault(batch, {})[name] = data[key]
        tolerance = self.model.tolerances[precision]
        failures: list[str] = []
        by_batch: dict[str, dict[str, object]] = {}
        for batch, outputs in sorted(runs.items(), key=lambda run: int(run[0] or 0)):
            metrics, failed = compare(
                dict(self.evaluation.reference), outputs, tolerance, self.model.outputs, decoding(self.model)
            )
            failures += [f"at batch {batch}: {f}" if batch else f for f in failed]
            by_batch[batch] = {name: asdict(m) for name, m in metrics.items()}
        # the metrics at the largest batch, and with several batch sizes, each one's
        result: dict[str, object] = dict(list(by_batch.values())[-1]) if by_batch else {}
        if len(by_batch) > 1:
            result["batches"] = by_batch
        return failures, result

    def _keep(
        self,
        precision: Precision,
        req: BuildRequest,
        plan: Path,
        built: Path,
        metrics: dict[str, object],
        staging: Path,
        exercised: list[int] | None = None,
        ms_per_sample: float | None = None,
    ) -> EngineResult:
        gpu = self.found.gpu
        assert gpu is not None and self.found.version is not None
        fp = self._expected(precision, req)
        built.replace(plan)
        write_metadata(
            plan,
            PlanMetadata(
                model=self.model.name,
                precision=precision.value,
                tensorrt_version=self.found.version,
                gpu_name=gpu.name,
                compute_capability=gpu.compute_capability,
                hardware_compatibility=req.hardware_compatibility,
                onnx_sha256=fp.onnx_sha256,
                options_sha256=fp.options_sha256,
                plan_sha256=sha256(plan),
                verification=metrics,
                profiles_verified=exercised or [],
                verification_sha256=fp.verification_sha256,
                tensorrt_cuda=self.found.cuda,
                ms_per_sample=ms_per_sample,
                profile_count=len(req.profiles),
            ),
        )
        shutil.rmtree(staging, ignore_errors=True)
        unverified = [i for i in range(len(req.profiles)) if i not in (exercised or [])]
        note = (
            f" (Triton serves no evaluation batch with profiles {unverified}: not run)" if unverified else ""
        )
        message = "built and verified" + note
        return EngineResult(self.model.name, precision, Status.BUILT, message, plan, fp)

    def _failed(
        self, precision: Precision, plan: Path, message: str, staging: Path | None = None
    ) -> EngineResult:
        # An old plan that could not be rebuilt must never be served: drop it with its metadata.
        plan.unlink(missing_ok=True)
        metadata_path(plan).unlink(missing_ok=True)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        return EngineResult(self.model.name, precision, Status.FAILED, message)
