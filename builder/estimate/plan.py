"""The memory plan: per model and variant, weights + activations at the profile's max shape,
times instances, against the memory of the GPU (or the host).

Device model (stated so it can be checked; ``tritonforge estimate --measure`` does):

* ``cpu`` (the local target: the variant's runtime inside a Python-backend stub, one process
  per instance, as many instances as the build sized it at): each instance holds the stub (the
  runtime's ``stub_memory``: interpreter, numpy, the library), its own weights, its own
  activations (``ARENA_GROWTH`` times the walked peak: ONNX Runtime's CPU arena grows in
  doubling regions and keeps them, so it holds up to twice the peak of live tensors), and the
  request/response tensors; the server process (``SERVER_BASE``) holds one more copy of the
  request/response tensors (shared memory).
  ONNX Runtime's CPU kernels compute fp16 models in fp32 (inserted casts), so activations
  count 4 bytes per element for fp32/fp16/int8_dynamic and 1 for static int8 (QLinear ops).
* ``gpu`` (TensorRT): weights once per model at the variant's precision, activations per
  instance (one execution context each) at the variant's precision, plus ``GPU_CONTEXT``.

Weights are the float (and int8) parameters of the fp32 graph times bytes per parameter.
Activations are the peak of live tensors over the graph at the max batch and each dynamic
input's profile max shape, from ONNX shape inference (no fusion or in-place reuse assumed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

from builder.estimate.graph import FLOAT_TYPES, activation_peak, count_params, io_bytes, natural_bytes
from builder.spec import ModelSpec, Precision, PythonModelSpec, Variant

MIB = 1024**2
GIB = 1024**3
# Measured here (tritonserver 2.51 from nvidia-pytriton 0.7, Python 3.11, onnxruntime 1.31):
SERVER_BASE = 34 * MIB  # tritonserver, explicit model control, nothing loaded
STUB_BASE = Variant(Precision.FP32).cpu_runtime.stub_memory  # a stub on the default runtime
SERVER_IO_COPIES = 2  # the server holds a request's tensors twice: the HTTP/gRPC body and the shm copy
GPU_CONTEXT = 300 * MIB  # CUDA context and TensorRT runtime (not measurable here: no GPU)

# ONNX Runtime's CPU arena (BFC) keeps what it has grown to; it grows by regions that double in
# size, so what it holds after a max-shape run is bounded by twice the peak of live tensors.
# Measured in-process (the stub's session options, one max-shape batch): 1.4x (ResNet-18 fp32)
# to 2.0x (MiniLM dynamic int8) the walked peak.
ARENA_GROWTH = 2

# bf16 (OpenVINO's, from the FP32 graph) is counted as the FP32 graph it reads: an upper bound.
PARAM_BYTES = {
    Precision.FP32: 4, Precision.FP16: 2, Precision.INT8: 1, Precision.INT8_DYNAMIC: 1, Precision.BF16: 4,
}  # fmt: skip
# Bytes per parameter resident on each device. ONNX Runtime's CPU provider runs static int8
# (Q/DQ) models' convolutions on dequantized weights: the int8 weights plus an fp32 copy.
RESIDENT_PARAM_BYTES = {
    "cpu": {**PARAM_BYTES, Precision.INT8: 1 + 4},
    "gpu": {Precision.FP32: 4, Precision.FP16: 2, Precision.INT8: 1},
}
# Bytes per float activation element. On the CPU the variant's own graph is walked (its Q/DQ
# nodes included) and floats count 4 bytes: ORT's x86 kernels compute fp16 models in fp32.
ACT_BYTES = {
    "cpu": {
        Precision.FP32: 4,
        Precision.FP16: 4,
        Precision.INT8: 4,
        Precision.INT8_DYNAMIC: 4,
        Precision.BF16: 4,
    },
    "gpu": {Precision.FP32: 4, Precision.FP16: 2, Precision.INT8: 1},
}


@dataclass
class Row:
    model: str
    variant: str
    device: str
    params: int
    weights: int
    activations: int
    io: int
    instances: int
    max_shape: str
    total: int  # this model loaded alone, server process included (cpu) or context included (gpu)
    model_bytes: int  # what the model adds: total minus the server / GPU context
    served: bool = False
    stub: int = 0  # one instance's stub before the model's own bytes (cpu)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def elem_bytes_for(device: str, precision: Precision):  # type: ignore[no-untyped-def]
    act = ACT_BYTES[device][precision]

    def size(onnx_type: int) -> int:
        return act if onnx_type in FLOAT_TYPES else natural_bytes(onnx_type)

    return size


def max_shapes(model: ModelSpec) -> dict[str, list[int]]:
    """Every input at the max batch and the first profile's max non-batch shape."""
    batch = [model.max_batch_size] if model.batched else []
    return {t.name: batch + list(model.shape_range(t).max) for t in model.inputs}


@dataclass(frozen=True)
class CpuServing:
    """How the build serves a variant on the CPU: its runtime (in the variant) and its instances."""

    variant: Variant
    instances: int


def cpu_servings(model: ModelSpec, published: Sequence[CpuServing] = ()) -> list[CpuServing]:
    """The published variants as served, then each precision of the spec that none of them runs,
    on the default runtime at the spec's instances."""
    done = {s.variant.precision for s in published}
    first: dict[Precision, Variant] = {}  # each precision's first variant (on a runtime that runs it)
    for v in model.variants():
        first.setdefault(v.precision, v)
    rest = [CpuServing(v, model.instances.count) for p, v in first.items() if p not in done]
    return list(published) + rest


def core_rows(
    model: ModelSpec, graphs: Mapping[Precision, Path], served: Variant | None,
    published: Sequence[CpuServing] = (),
) -> list[Row]:  # fmt: skip
    """Rows for each variant on the cpu (``published`` as the build serves them, see
    ``cpu_servings``) and each precision on the gpu. ``graphs``: the ONNX file of each built
    precision; parameters are counted on the fp32 graph (else any), activations on the variant's
    own graph for the cpu (what its runtime runs) and on the fp32 graph, scaled, for the gpu
    (TensorRT fuses Q/DQ)."""
    loaded = {p: onnx.load(str(path)) for p, path in graphs.items()}
    reference = loaded.get(Precision.FP32) or next(iter(loaded.values()))
    rows = [
        _cpu_row(model, s, loaded.get(s.variant.precision.graph, reference), reference, served)
        for s in cpu_servings(model, published)
    ]
    rows += [_gpu_row(model, p, reference) for p in model.precisions if p in ACT_BYTES["gpu"]]
    return rows


def _cpu_row(model: ModelSpec, s: CpuServing, graph: onnx.ModelProto, reference: onnx.ModelProto,
             served: Variant | None) -> Row:  # fmt: skip
    precision, n = s.variant.precision, s.instances
    params, shapes = count_params(reference), max_shapes(model)
    size = elem_bytes_for("cpu", precision)
    weights = params * PARAM_BYTES[precision]
    resident = params * RESIDENT_PARAM_BYTES["cpu"][precision]
    peak = activation_peak(graph, shapes, size)
    act = peak * ARENA_GROWTH
    io = io_bytes(graph, shapes, size)
    stub = s.variant.cpu_runtime.stub_memory
    model_bytes = n * (stub + resident + act + io) + SERVER_IO_COPIES * io
    row = Row(model.name, s.variant.name, "cpu", params, weights, act, io, n, _shape_text(shapes),
              SERVER_BASE + model_bytes, model_bytes, served=s.variant == served, stub=stub)  # fmt: skip
    if act != peak:
        row.notes.append(f"activations: arena bound {ARENA_GROWTH} x live peak {peak / MIB:.1f} MiB")
    if resident != weights:
        row.notes.append(f"resident weights {resident / MIB:.1f} MiB (int8 + fp32 copy)")
    return row


def _gpu_row(model: ModelSpec, precision: Precision, reference: onnx.ModelProto) -> Row:
    params, shapes, n = count_params(reference), max_shapes(model), model.instances.count
    size = elem_bytes_for("gpu", precision)
    weights = params * PARAM_BYTES[precision]
    resident = params * RESIDENT_PARAM_BYTES["gpu"][precision]
    act = activation_peak(reference, shapes, size)
    model_bytes = resident + n * act
    return Row(model.name, precision.value, "gpu", params, weights, act, io_bytes(reference, shapes, size), n,
               _shape_text(shapes), GPU_CONTEXT + model_bytes, model_bytes)  # fmt: skip


def _shape_text(shapes: Mapping[str, list[int]]) -> str:
    return ", ".join(f"{k}{v}" for k, v in shapes.items())


def python_row(pm: PythonModelSpec) -> Row:
    n = pm.instances.count
    return Row(pm.name, "python", "cpu", 0, 0, 0, 0, n, "-", SERVER_BASE + n * STUB_BASE, n * STUB_BASE,
               served=True, stub=STUB_BASE)  # fmt: skip


def advise(rows: list[Row], capacity: int, device: str, models: dict[str, ModelSpec]) -> list[str]:
    """When the served plan does not fit: what to cut first, with the bytes each cut saves."""
    plan = [r for r in rows if r.device == device and (r.served or device == "gpu")]
    if device == "gpu":  # one variant per model on the GPU: the first in GPU preference
        chosen: dict[str, Row] = {}
        for r in plan:
            if r.model not in chosen or _gpu_rank(r.variant) < _gpu_rank(chosen[r.model].variant):
                chosen[r.model] = r
        plan = list(chosen.values())
    base = SERVER_BASE if device == "cpu" else GPU_CONTEXT
    total = base + sum(r.model_bytes for r in plan)
    lines = [f"{device}: plan {total / GIB:.2f} GiB of {capacity / GIB:.2f} GiB"]
    if total <= capacity:
        return [lines[0] + " - fits"]
    lines[0] += f" - DOES NOT FIT (over by {(total - capacity) / GIB:.2f} GiB); cut first:"
    cuts: list[tuple[int, str]] = []
    for r in plan:
        spec = models.get(r.model)
        if spec is None:
            continue
        lower = [x for x in rows if x.model == r.model and x.device == device and x.total < r.total]
        if lower:
            best = min(lower, key=lambda x: x.total)
            cuts.append((r.total - best.total, f"precision: {r.model} {r.variant} -> {best.variant}"))
        if spec.max_batch_size > 1:
            saved = (r.activations + r.io) * r.instances // 2
            cuts.append((saved, f"max shape: {r.model} max_batch_size {spec.max_batch_size} -> "
                                f"{spec.max_batch_size // 2}"))  # fmt: skip
        if r.instances > 1:
            per = r.activations + (r.weights + r.stub + r.io if device == "cpu" else 0)
            cuts.append((per * (r.instances - 1), f"instances: {r.model} {r.instances} -> 1"))
    for saved, text in sorted((c for c in cuts if c[0] > 0), key=lambda c: -c[0]):
        lines.append(f"  - {text}: saves {_size(saved)}")
    return lines


def _size(n: int) -> str:
    return f"{n / MIB:.0f} MiB" if n >= MIB else f"{n / 1024:.1f} KiB"


def _gpu_rank(variant: str) -> int:
    order = ["int8", "fp16", "fp32"]
    return order.index(variant) if variant in order else len(order)


def table(rows: list[Row]) -> str:
    head = ["model", "variant", "device", "params", "weights MiB", "activations MiB", "io MiB", "instances",
            "max shape", "model MiB", "total MiB"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        mark = " (served)" if r.served and r.device == "cpu" and r.variant != "python" else ""
        lines.append(
            f"| {r.model} | {r.variant}{mark} | {r.device} | {r.params:,} | {r.weights / MIB:.1f} | "
            f"{r.activations / MIB:.1f} | {r.io / MIB:.1f} | {r.instances} | {r.max_shape} | "
            f"{r.model_bytes / MIB:.1f} | {r.total / MIB:.1f} |"
        )
    return "\n".join(lines) + "\n"
