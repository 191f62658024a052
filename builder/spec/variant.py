"""What a served variant is: a precision of the model run by one runtime.

The same ONNX graph runs several times faster on one CPU runtime than another (OpenVINO's bf16 on
AMX against ONNX Runtime's fp32), so a runtime is part of a variant, verified and timed like its
precision. ``Variant.name`` is what the repository and the build's summary call it: the precision
alone for ONNX Runtime (the names every repository had before runtimes were a choice), else
``<precision>_<runtime>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


class Runtime(str, Enum):
    """The CPU runtimes a core model can be verified and served on."""

    ONNXRUNTIME = "onnxruntime"
    OPENVINO = "openvino"


# The precisions each runtime runs. OpenVINO is left out of fp16 (its CPU plugin computes an FP16
# graph in f32 or bf16: the fp32 and bf16 variants already are those) and int8_dynamic (it does
# not lower ONNX Runtime's dynamic quantization: 2.3x slower than ORT on it).
RUNS: dict[Runtime, frozenset[Precision]] = {
    Runtime.ONNXRUNTIME: frozenset({Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC}),
    Runtime.OPENVINO: frozenset({Precision.FP32, Precision.BF16, Precision.INT8}),
}


@dataclass(frozen=True, order=True)
class Variant:
    precision: Precision
    runtime: Runtime = Runtime.ONNXRUNTIME

    @property
    def name(self) -> str:
        if self.runtime is Runtime.ONNXRUNTIME:
            return self.precision.value
        return f"{self.precision.value}_{self.runtime.value}"

    @classmethod
    def parse(cls, name: str) -> Variant:
        """The variant ``name`` names (``int8``, ``bf16_openvino``); ValueError otherwise."""
        for runtime in Runtime:
            for precision in RUNS[runtime]:
                if cls(precision, runtime).name == name:
                    return cls(precision, runtime)
        raise ValueError(f"'{name}' names no variant")

    def __str__(self) -> str:
        return self.name


def variants_of(precisions: list[Precision], runtimes: list[Runtime], *, stateful: bool) -> list[Variant]:
    """Every pair of a wanted precision and a runtime that runs it, runtime by runtime. A stateful
    model runs on ONNX Runtime alone (its sequence runner keeps the states)."""
    chosen = [Runtime.ONNXRUNTIME] if stateful else runtimes
    return [Variant(p, r) for r in chosen for p in precisions if p in RUNS[r]]


def as_variant(variant: Variant | Precision) -> Variant:
    """A precision alone names its ONNX Runtime variant."""
    return variant if isinstance(variant, Variant) else Variant(variant)
