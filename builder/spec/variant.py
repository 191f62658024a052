"""What a served variant is: a precision of the model run by one CPU runtime.

The same ONNX graph runs several times faster on one CPU runtime than another (OpenVINO's bf16 on
AMX against ONNX Runtime's fp32), so a runtime is part of a variant, verified and timed like its
precision. The runtimes are the registry of ``builder/python_models/shared/runtimes`` (one module
each), named here by their names. ``Variant.name`` is what the repository and the build's summary
call it: the precision alone on the default runtime (ONNX Runtime: the names every repository had
before runtimes were a choice), else ``<precision>_<runtime>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator

from builder.python_models.shared.runtimes import DEFAULT, RUNTIMES, CpuRuntime, runtime


class Precision(str, Enum):
    """Precisions of a model. ``int8`` is static, calibrated, explicit Q/DQ (what TensorRT
    consumes); ``int8_dynamic`` is ONNX Runtime's dynamic quantization, for the CPU targets only
    (TensorRT has no kernels for it); ``bf16`` is the FP32 graph computed in bfloat16 by a runtime
    that has it (OpenVINO on a CPU with AVX-512 BF16 or AMX)."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    INT8_DYNAMIC = "int8_dynamic"
    BF16 = "bf16"

    @property
    def graph(self) -> Precision:
        """The precision whose ONNX graph this one runs (bf16 runs the FP32 graph)."""
        return Precision.FP32 if self is Precision.BF16 else self


ONNXRUNTIME = DEFAULT  # ONNX Runtime: what TensorRT plans are checked against, the targets' default


def _registered(name: str) -> str:
    runtime(name)  # ValueError naming the registered runtimes
    return name


# A runtime's name in the spec (``runtimes: [openvino]``, ``serve.runtime``), checked against the registry.
RuntimeName = Annotated[str, AfterValidator(_registered)]


def runtime_names() -> list[str]:
    return list(RUNTIMES)


def runs_on(precision: Precision) -> list[str]:
    """The registered runtimes that run ``precision``."""
    return [name for name, on in RUNTIMES.items() if on.runs(precision.value)]


@dataclass(frozen=True, order=True)
class Variant:
    precision: Precision
    runtime: str = ONNXRUNTIME  # a registered runtime's name

    @property
    def name(self) -> str:
        if self.runtime == ONNXRUNTIME:
            return self.precision.value
        return f"{self.precision.value}_{self.runtime}"

    @property
    def cpu_runtime(self) -> CpuRuntime:
        return runtime(self.runtime)

    @classmethod
    def parse(cls, name: str) -> Variant:
        """The variant ``name`` names (``int8``, ``bf16_openvino``); ValueError otherwise."""
        for on in RUNTIMES.values():
            for precision in Precision:
                if on.runs(precision.value) and cls(precision, on.name).name == name:
                    return cls(precision, on.name)
        raise ValueError(f"'{name}' names no variant")

    def __str__(self) -> str:
        return self.name


def variants_of(precisions: list[Precision], runtimes: list[str], *, stateful: bool) -> list[Variant]:
    """Every pair of a wanted precision and a runtime that runs it, runtime by runtime. A stateful
    model runs on ONNX Runtime alone (its sequence runner keeps the states)."""
    chosen = [ONNXRUNTIME] if stateful else runtimes
    return [Variant(p, r) for r in chosen for p in precisions if runtime(r).runs(p.value)]


def as_variant(variant: Variant | Precision) -> Variant:
    """A precision alone names its ONNX Runtime variant."""
    return variant if isinstance(variant, Variant) else Variant(variant)
