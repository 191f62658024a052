"""The int8 stage: the static INT8 graph (explicit Q/DQ) from the calibration of ``int8-ranges``,
by the recipe of the target that serves it (ONNX Runtime's, or TensorRT's with its calibration
table where the spec asks for TensorRT 10's implicit INT8)."""

from __future__ import annotations

from pathlib import Path

from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact, settle
from builder.stages.check import CHECK
from builder.stages.int8_ranges import INT8_RANGES
from builder.stages.quantize import (
    SMOOTHED,
    Calibrated,
    calibration_samples,
    int8_recipe,
    quantize_calibrated,
)

TABLE = "calibration.cache"  # TensorRT's calibration table, beside the graph


class Int8Inputs(StageInputs):
    STAGE = "int8"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = ("builder.stages.int8",)
    ranges_key: str
    recipe: dict[str, bool]


class Int8(Stage):
    name = Int8Inputs.STAGE

    def inputs(self, job: ModelJob) -> Int8Inputs:
        recipe = int8_recipe(job.tensorrt, job.model)
        return Int8Inputs(ranges_key=job.result(INT8_RANGES.name).key, recipe=recipe.fields())

    def run(self, job: ModelJob, out: Path) -> Info:
        ranges = job.result(INT8_RANGES.name)
        fp32 = job.graph(CHECK.name)
        recipe = int8_recipe(job.tensorrt, job.model)
        # A smoothed source is not the graph TensorRT parses (fp32): its table is calibrated apart.
        source = ranges.out / SMOOTHED if ranges.info["smoothed"] else fp32
        calibrated = Calibrated.read(ranges.out, source, ranges.info)
        samples = calibration_samples(job) if recipe.calibration_table else None
        result = quantize_calibrated(job.model, calibrated, out, recipe, samples=samples, tensorrt_graph=fp32)
        settle(result.onnx, out / GRAPH)
        if result.calibration_table is not None:
            settle(result.calibration_table, out / TABLE)
        return artifact(out / GRAPH) | ({"note": result.note} if result.note else {})


INT8 = Int8()
