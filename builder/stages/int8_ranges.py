"""The int8-ranges stage: the calibration static INT8 is made from, shared by every target's recipe
(the graph ready for ``quantize_static``, smoothed where the spec asks, and its activations' ranges:
the spec's method's, and where the INT8 search runs, every searched method's from the same pass)."""

from __future__ import annotations

from pathlib import Path

from builder.spec import Calibration
from builder.stages.base import Info, ModelJob, Stage, StageInputs
from builder.stages.check import CHECK
from builder.stages.fingerprints import data_fingerprint
from builder.stages.quantize import SMOOTHED, calibrate_int8, calibration_samples, smoothed


class Int8RangesInputs(StageInputs):
    STAGE = "int8-ranges"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = ("builder.stages.int8_ranges",)
    checked_sha256: str
    calibration: dict[str, object]  # the spec's calibration, less the search's budget
    candidates: bool  # every searched method's ranges too (the search runs)
    data: str  # fingerprint of the calibration data and its reader
    opset: dict[str, bool]  # where the checked graph is below opset 13 (converted, or per tensor)


class Int8Ranges(Stage):
    name = Int8RangesInputs.STAGE

    def inputs(self, job: ModelJob) -> Int8RangesInputs:
        calibration = job.model.calibration
        assert calibration is not None  # the spec requires it for int8
        return Int8RangesInputs(
            checked_sha256=job.sha256(CHECK.name),
            calibration=calibration.model_dump(mode="json", exclude={"search"}),
            candidates=_candidates(calibration), data=data_fingerprint(calibration, job.ctx.spec_dir),
            opset=_opset_conversion(job),
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        assert job.model.calibration is not None
        fp32 = job.graph(CHECK.name)
        samples = calibration_samples(job)
        source = smoothed(fp32, job.model.calibration.smooth, samples, out)
        calibrated = calibrate_int8(
            job.model, source, samples, out, candidates=_candidates(job.model.calibration)
        )
        (out / SMOOTHED).unlink(missing_ok=True)
        return calibrated.to_info() | {"smoothed": source != fp32}


def _candidates(calibration: Calibration) -> bool:
    return calibration.search.max_trials > 0


def _opset_conversion(job: ModelJob) -> dict[str, bool]:
    """In the key where the checked graph is below opset 13 (converted, or per tensor)."""
    opset = job.result(CHECK.name).info.get("opset")
    return {"below_opset_13": True} if isinstance(opset, int) and opset < 13 else {}


INT8_RANGES = Int8Ranges()
