"""Weights and activation memory of an ONNX graph, from its initializers and shape inference."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, shape_inference

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}


def count_params(model: onnx.ModelProto) -> int:
    """Float parameters: initializers and Constant-node tensors (integer shape constants excluded)."""
    total = 0
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        if t.data_type in FLOAT_TYPES or t.data_type in (TensorProto.INT8, TensorProto.UINT8):
            total += int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    return total


def concrete(model: onnx.ModelProto, shapes: Mapping[str, list[int]]) -> onnx.ModelProto:
    """A copy with every graph input's shape set (full shapes, batch dimension included), inferred."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    init = {t.name for t in m.graph.initializer}
    for inp in m.graph.input:
        if inp.name in init or inp.name not in shapes:
            continue
        dims = inp.type.tensor_type.shape.dim
        for d, size in zip(dims, shapes[inp.name], strict=True):
            d.ClearField("dim_param")
            d.dim_value = int(size)
    for out in m.graph.output:  # outputs are re-inferred from the new input shapes
        for d in out.type.tensor_type.shape.dim:
            d.ClearField("dim_value")
            d.ClearField("dim_param")
    return shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)


def activation_peak(
    model: onnx.ModelProto, shapes: Mapping[str, list[int]], elem_bytes: Callable[[int], int]
) -> int:
    """Peak bytes of live tensors walking the nodes in order (inputs and outputs included).

    A tensor is live from the node that makes it to its last consumer; graph outputs stay live
    to the end. No in-place reuse or operator fusion is assumed (an upper-side estimate of
    what a runtime's planner keeps). ``elem_bytes(onnx_type)`` gives bytes per element.
    """
    m = concrete(model, shapes)
    init = {t.name for t in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Constant":
            init.update(node.output)
    sizes: dict[str, int] = {}
    for vi in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            continue
        n = int(np.prod([d.dim_value for d in tt.shape.dim], dtype=np.int64))
        sizes[vi.name] = n * elem_bytes(tt.elem_type)
    last_use: dict[str, int] = {}
    for i, node in enumerate(m.graph.node):
        for name in node.input:
            last_use[name] = i
    keep = {o.name for o in m.graph.output}
    live = {i.name for i in m.graph.input if i.name not in init}
    current = sum(sizes.get(n, 0) for n in live)
    peak = current
    for i, node in enumerate(m.graph.node):
        for out in node.output:
            if out and out not in init and out not in live:
                live.add(out)
                current += sizes.get(out, 0)
        peak = max(peak, current)
        for name in set(node.input):
            if name in live and last_use.get(name) == i and name not in keep:
                live.discard(name)
                current -= sizes.get(name, 0)
    return peak


def io_bytes(
    model: onnx.ModelProto, shapes: Mapping[str, list[int]], elem_bytes: Callable[[int], int]
) -> int:
    """Bytes of the graph's inputs and outputs at the given input shapes."""
    m = concrete(model, shapes)
    total = 0
    init = {t.name for t in m.graph.initializer}
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name in init:
            continue
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        total += int(np.prod(dims, dtype=np.int64)) * elem_bytes(vi.type.tensor_type.elem_type)
    return total


def natural_bytes(onnx_type: int) -> int:
    return int(helper.tensor_dtype_to_np_dtype(onnx_type).itemsize)
