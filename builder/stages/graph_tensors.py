"""A spec tensor held against a graph tensor: its dtype, rank, batch dim and static dims.

A leaf of ``builder.stages``: ``check`` compares the graph's inputs and outputs with it, and
``sequence`` the states a stateful model's server keeps.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from builder.dtypes import FROM_ONNX
from builder.spec import ModelSpec, TensorSpec


def tensor_problem(model: ModelSpec, t: TensorSpec, value: onnx.ValueInfoProto) -> tuple[str, str] | None:
    """(field, message) of the first disagreement between a spec tensor and a graph tensor."""
    if not value.type.HasField("tensor_type"):
        return "dtype", f"graph '{t.name}' is not a tensor ({value.type.WhichOneof('value')})"
    tensor = value.type.tensor_type
    graph_dtype = FROM_ONNX.get(tensor.elem_type)
    if graph_dtype is not t.dtype:
        said = graph_dtype.value if graph_dtype else TensorProto.DataType.Name(tensor.elem_type)
        return "dtype", f"graph says {said}, spec says {t.dtype.value}"
    if not tensor.HasField("shape"):
        return "dims", f"graph gives '{t.name}' no shape; cannot check dims {t.dims}"
    return _shape_problem(model, t, list(tensor.shape.dim))


def _shape_problem(
    model: ModelSpec, t: TensorSpec, dims: list[onnx.TensorShapeProto.Dimension]
) -> tuple[str, str] | None:
    batched = model.batched
    shape = _shape_text(dims)
    if len(dims) != len(t.dims) + batched:
        hint = (
            "; dims exclude the batch dimension, which max_batch_size > 0 adds in front"
            if batched
            else "; with max_batch_size 0, dims are the full shape"
        )
        return (
            "dims",
            f"graph shape {shape} has rank {len(dims)}, spec dims {t.dims} give rank "
            f"{len(t.dims) + batched}{hint}",
        )
    if batched and _fixed(dims[0]):
        return "max_batch_size", (
            f"graph fixes the batch dim of '{t.name}' to {dims[0].dim_value} (shape {shape}); "
            f"max_batch_size {model.max_batch_size} needs it dynamic (or use max_batch_size 0 with full dims)"
        )
    for axis, (g, s) in enumerate(zip(dims[batched:], t.dims, strict=True)):
        if _fixed(g) and g.dim_value != s:
            return "dims", f"axis {axis} (graph shape {shape}): graph says {g.dim_value}, spec says {s}"
    return None


def _fixed(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return dim.HasField("dim_value") and dim.dim_value > 0


def _shape_text(dims: list[onnx.TensorShapeProto.Dimension]) -> str:
    parts = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    return "[" + ", ".join(parts) + "]"
