"""The physical limit of a host for a model: the FLOPs one call of its ONNX graph does (Conv,
MatMul and Gemm multiply-accumulates x 2, counted from the graph's shapes) against the CPU's peak
for the precision the variant computes in (per cycle per core, from /proc/cpuinfo's flags, x cores
x clock). Other operators (activations, normalisation, softmax, pooling) are left out: they are a
few per cent of the FLOPs of these models and bound by memory, not by the multiply units."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAC_OPS = ("Conv", "MatMul", "Gemm")

# Multiply-accumulates per cycle per core of the fastest unit for a precision that a flag brings,
# best first. The AMX tiles: TDPBF16PS multiplies 16x32 by 32x16 bf16 (8192 MACs) and TDPBSSD 16x64
# by 64x16 int8 (16384) every 16 cycles (Intel's optimization manual). AVX-512 and AVX2: two FMA
# ports, as Xeon Gold and Platinum cores have (one-port parts reach half); a 512-bit VNNI dot
# product is 64 int8 MACs, a 512-bit VDPBF16PS 32 bf16 MACs, an FMA 16 fp32 ones.
UNITS: dict[str, tuple[tuple[str, int], ...]] = {
    "int8": (("amx_int8", 1024), ("avx512_vnni", 128), ("avx_vnni", 64), ("avx2", 32)),
    "bf16": (("amx_bf16", 512), ("avx512_bf16", 64), ("avx512f", 32), ("avx2", 16)),
    "fp32": (("avx512f", 32), ("avx2", 16)),
}
# The precision a variant's multiply units compute in: ONNX Runtime's fp16 graph is computed in
# fp32 on the CPU; OpenVINO's int8 runs the Q/DQ graph's convolutions and matrix products in int8.
COMPUTES = {"fp32": "fp32", "fp16": "fp32", "bf16": "bf16", "int8": "int8", "int8_dynamic": "int8"}


@dataclass(frozen=True)
class Peak:
    """A CPU's peak for one precision: FLOPs (ops, for int8) per second, and how it was derived."""

    precision: str
    unit: str  # the flag whose unit gives it
    flops_per_cycle_core: int
    cores: int
    ghz: float

    @property
    def flops_per_s(self) -> float:
        return self.flops_per_cycle_core * self.cores * self.ghz * 1e9

    def how(self) -> str:
        return (
            f"{self.precision} on {self.unit}: {self.flops_per_cycle_core} FLOP/cycle/core x "
            f"{self.cores} cores x {self.ghz:g} GHz = {self.flops_per_s / 1e9:,.0f} GFLOP/s"
        )


def peak(flags: Collection[str], precision: str, cores: int, ghz: float) -> Peak | None:
    """The peak for ``precision`` ("fp32", "bf16", "int8") from the fastest unit the flags name;
    None where no unit for it is there."""
    for flag, macs in UNITS[precision]:
        if flag in flags:
            return Peak(precision, flag, 2 * macs, cores, ghz)
    return None


def clock_ghz(cpuinfo: str) -> float | None:
    """The first core's clock as /proc/cpuinfo gives it (``cpu MHz``; under a hypervisor the
    host's nominal clock, which turbo may exceed)."""
    for line in cpuinfo.splitlines():
        if line.startswith("cpu MHz"):
            with contextlib.suppress(ValueError):
                return float(line.split(":", 1)[1]) / 1000
    return None


def variant_precision(variant: str) -> str:
    """The precision a variant named like ``int8_openvino`` or ``fp16`` computes in."""
    for name in sorted(COMPUTES, key=len, reverse=True):
        if variant == name or variant.startswith(name + "_"):
            return COMPUTES[name]
    raise ValueError(f"'{variant}' names no precision")


# ---------------------------------------------------------------- FLOPs of a graph


def graph_macs(graph: Any, shapes: Mapping[str, Sequence[int]]) -> int:
    """Multiply-accumulates of the graph's Conv, MatMul and Gemm nodes, given every tensor's shape."""
    total = 0
    for node in graph.node:
        if node.op_type in MAC_OPS:
            total += node_macs(node, shapes)
    return total


def node_macs(node: Any, shapes: Mapping[str, Sequence[int]]) -> int:
    """One node's MACs: each output element takes one MAC per element of its reduction axis
    (Conv: the weight's [C_in / group, kh, kw]; MatMul: A's last axis; Gemm: A's K)."""
    out = math.prod(_shape(shapes, node.output[0]))
    a = _shape(shapes, node.input[0])
    if node.op_type == "Conv":
        return out * math.prod(_shape(shapes, node.input[1])[1:])
    if node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute):
        return out * a[0]
    return out * a[-1]


def _shape(shapes: Mapping[str, Sequence[int]], name: str) -> Sequence[int]:
    shape = shapes.get(name)
    if shape is None or any(d <= 0 for d in shape):
        raise ValueError(f"no known shape for tensor '{name}'")
    return shape


def model_flops(path: Path, dims: Mapping[str, Sequence[int]]) -> int:
    """FLOPs (2 x MACs) of one call of the ONNX file at these input shapes (batch included)."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = onnx.load(str(path))
    for tensor in model.graph.input:
        for dim, value in zip(tensor.type.tensor_type.shape.dim, dims.get(tensor.name, ()), strict=False):
            dim.Clear()
            dim.dim_value = value
    # ONNX's own inference leaves some attention shapes unknown; ONNX Runtime's symbolic one does not.
    model = SymbolicShapeInference.infer_shapes(model)
    return 2 * graph_macs(model.graph, tensor_shapes(model.graph))


def tensor_shapes(graph: Any) -> dict[str, list[int]]:
    shapes = {i.name: list(i.dims) for i in graph.initializer}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        shapes[v.name] = [
            d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim
        ]
    return shapes
