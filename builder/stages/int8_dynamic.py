"""The int8_dynamic stage: ONNX Runtime's dynamic quantization (CPU targets only), on the graph
smoothed first where the spec asks (with the calibration samples)."""

from __future__ import annotations

from pathlib import Path

from builder.spec import DynamicInt8
from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact, settle
from builder.stages.check import CHECK
from builder.stages.fingerprints import data_fingerprint
from builder.stages.quantize import SMOOTHED, calibration_samples, quantize_int8_dynamic, smoothed


class Int8DynamicInputs(StageInputs):
    STAGE = "int8_dynamic"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = ("builder.stages.int8_dynamic",)
    checked_sha256: str
    options: DynamicInt8
    data: str | None  # calibration data, when smoothing uses it


class Int8Dynamic(Stage):
    name = Int8DynamicInputs.STAGE

    def inputs(self, job: ModelJob) -> Int8DynamicInputs:
        model = job.model
        smooth = model.int8_dynamic.smooth
        data = data_fingerprint(model.calibration, job.ctx.spec_dir) if smooth and model.calibration else None
        return Int8DynamicInputs(checked_sha256=job.sha256(CHECK.name), options=model.int8_dynamic, data=data)

    def run(self, job: ModelJob, out: Path) -> Info:
        fp32 = job.graph(CHECK.name)
        smooth = job.model.int8_dynamic.smooth
        source = smoothed(fp32, smooth, calibration_samples(job), out) if smooth is not None else fp32
        settle(quantize_int8_dynamic(job.model, source, out), out / GRAPH)
        (out / SMOOTHED).unlink(missing_ok=True)
        return artifact(out / GRAPH)


INT8_DYNAMIC = Int8Dynamic()
