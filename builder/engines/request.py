"""What one engine build does, decided up front and written as JSON for the worker.

The recipe per precision and TensorRT major version lives here, in one table:

============  =======================================  ==========================================
precision     TensorRT 10                              TensorRT 11 (weak typing removed)
============  =======================================  ==========================================
fp32          FP32 ONNX                                FP32 ONNX, strongly typed
fp16          FP32 ONNX + BuilderFlag.FP16             FP16 ONNX variant, strongly typed
int8          Q/DQ ONNX variant + INT8/FP16 flags      Q/DQ ONNX variant, strongly typed
int8 (calib)  FP32 ONNX + INT8/FP16 flags + table      not available (calibrators removed)
============  =======================================  ==========================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder.engines.profiles import InputRange, profile_shapes
from builder.engines.versions import missing_feature, parse
from builder.spec import ModelSpec, Precision
from builder.spec.engine import EngineOptions, Int8Mode

PLAN_PRECISIONS = (Precision.FP32, Precision.FP16, Precision.INT8)  # int8_dynamic has no TensorRT kernels


class RecipeError(Exception):
    """This plan cannot be built from what the CPU stages produced (one model, one precision)."""


@dataclass
class BuildRequest:
    model: str
    precision: str
    onnx: str
    plan: str
    timing_cache: str
    strongly_typed: bool
    builder_flags: list[str]  # BuilderFlag member names
    profiles: list[list[InputRange]]
    workspace_mib: int | None
    optimization_level: int
    hardware_compatibility: str  # HardwareCompatibilityLevel member name
    calibration_table: str | None = None
    eval_inputs: str | None = None  # .npz the worker runs the plan on
    eval_outputs: str | None = None  # .npz it writes the plan's outputs to
    eval_timing: str | None = None  # .json it writes the plan's measured latency to
    batch_size: int = 1  # samples per inference; 0 = unbatched model, one sample at a time
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> BuildRequest:
        raw = json.loads(text)
        raw["profiles"] = [
            [InputRange(r["name"], tuple(r["min"]), tuple(r["opt"]), tuple(r["max"])) for r in p]
            for p in raw["profiles"]
        ]
        return cls(**raw)


def make_request(
    model: ModelSpec,
    options: EngineOptions,
    precision: Precision,
    variants: dict[Precision, Path],
    calibration_table: Path | None,
    trt_version: str,
    *,
    plan: Path,
    timing_cache: Path,
) -> BuildRequest:
    missing = missing_feature(trt_version, options.hardware_compatibility.name)
    if missing:
        field = f"engine.hardware_compatibility '{options.hardware_compatibility.value}'"
        raise RecipeError(f"{field}: {missing}")
    trt_major = parse(trt_version)[0]
    onnx, strongly_typed, flags, table = _recipe(options, precision, variants, calibration_table, trt_major)
    return BuildRequest(
        model=model.name,
        precision=precision.value,
        onnx=str(onnx),
        plan=str(plan),
        timing_cache=str(timing_cache),
        strongly_typed=strongly_typed,
        builder_flags=flags,
        profiles=profile_shapes(model),
        workspace_mib=options.workspace_mib,
        optimization_level=options.optimization_level,
        hardware_compatibility=options.hardware_compatibility.name,
        calibration_table=str(table) if table else None,
        batch_size=model.max_batch_size,
    )


def _recipe(
    options: EngineOptions,
    precision: Precision,
    variants: dict[Precision, Path],
    table: Path | None,
    trt_major: int,
) -> tuple[Path, bool, list[str], Path | None]:
    legacy = trt_major < 11
    if precision is Precision.FP32:
        return _variant(variants, Precision.FP32), not legacy, [], None
    if precision is Precision.FP16:
        if legacy:
            return _variant(variants, Precision.FP32), False, ["FP16"], None
        return _variant(variants, Precision.FP16), True, [], None
    if precision is Precision.INT8 and options.int8_mode is Int8Mode.CALIBRATOR:
        if not legacy:
            raise RecipeError(
                f"engine.int8_mode 'calibrator' needs TensorRT 10 (TensorRT {trt_major} removed "
                "calibrators); use int8_mode: explicit"
            )
        if table is None or not table.is_file():
            raise RecipeError("engine.int8_mode 'calibrator': the CPU stage wrote no calibration table")
        return _variant(variants, Precision.FP32), False, ["INT8", "FP16"], table
    if precision is Precision.INT8 and legacy:
        # Weakly typed with FP16 allowed (`trtexec --int8 --fp16`): the Q/DQ layers run in INT8
        # and the rest may take FP16, not FP32 as a strongly typed build would have them.
        return _variant(variants, Precision.INT8), False, ["INT8", "FP16"], None
    if precision is Precision.INT8:
        return _variant(variants, Precision.INT8), True, [], None
    raise RecipeError(f"precision '{precision.value}' has no TensorRT plan")


def _variant(variants: dict[Precision, Path], precision: Precision) -> Path:
    path = variants.get(precision)
    if path is None or not path.is_file():
        raise RecipeError(f"the {precision.value} ONNX variant is missing ({path})")
    return path
