"""TensorRT build options of one model: the ``engine:`` section of models.yaml (gpu target)."""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

_CC = re.compile(r"^\d{1,2}\.\d$")


class HardwareCompatibility(str, Enum):
    """TensorRT's HardwareCompatibilityLevel. ``ampere_plus`` plans run on any GPU of
    compute capability 8.0 or newer, at some cost in speed."""

    NONE = "none"
    AMPERE_PLUS = "ampere_plus"
    SAME_COMPUTE_CAPABILITY = "same_compute_capability"


class Int8Mode(str, Enum):
    """``explicit``: build from the verified Q/DQ ONNX (TensorRT 10 and 11).
    ``calibrator``: TensorRT 10 only, implicit INT8 from the FP32 ONNX and the
    calibration table the CPU stage wrote (no calibration pass on the GPU)."""

    EXPLICIT = "explicit"
    CALIBRATOR = "calibrator"


def _compute_capability(value: str) -> str:
    if not _CC.match(value):
        raise ValueError(f"'{value}' is not a compute capability such as '8.6'")
    return value


ComputeCapability = Annotated[str, AfterValidator(_compute_capability)]


class EngineOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace_mib: Annotated[int, Field(ge=1)] | None = None  # None = TensorRT's default (all GPU memory)
    optimization_level: Annotated[int, Field(ge=0, le=5)] = 3
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.NONE
    cuda_graphs: bool = False  # Triton's tensorrt_plan backend: optimization.cuda { graphs: true }
    int8_mode: Int8Mode = Int8Mode.EXPLICIT
    # One repository for several GPU generations: plans named per compute capability
    # (model.sm86.plan) and Triton's cc_model_filenames mapping; each built on its own GPU.
    cc_model_filenames: list[ComputeCapability] = []
    build_timeout_s: Annotated[int, Field(ge=1)] = 3600


def plan_filename(options: EngineOptions, compute_capability: str) -> str:
    """The plan's file name in the version folder for a GPU of this compute capability."""
    if not options.cc_model_filenames:
        return "model.plan"
    return f"model.sm{compute_capability.replace('.', '')}.plan"


def cc_model_filenames(options: EngineOptions) -> dict[str, str]:
    """Triton's ``cc_model_filenames`` (compute capability -> file); empty if not asked for."""
    return {cc: plan_filename(options, cc) for cc in options.cc_model_filenames}
