"""Rank-0 graph inputs and outputs as [1] tensors, for models without a batch dimension.

Triton has no rank-0 tensor in a model that does not batch (2.51 refuses an empty ``reshape``
there), so a scalar is served as a one-element tensor: where the spec gives dims ``[1]`` for a
tensor the graph declares rank 0, the exported graph takes ``[1]`` and reshapes it to ``[]`` inside
(outputs the other way), and every later stage, target and client sees the same ``[1]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from builder.spec import ModelSpec

SUFFIX = "__rank0"


def scalar_names(model: ModelSpec, graph: onnx.ModelProto) -> set[str]:
    """Tensors the spec gives dims [1] that the graph declares rank 0 (none when the model batches)."""
    if model.batched:
        return set()
    wanted = {t.name for t in [*model.inputs, *model.outputs] if t.dims == [1]}
    return {
        v.name
        for v in [*graph.graph.input, *graph.graph.output]
        if v.name in wanted and v.type.HasField("tensor_type") and _rank0(v)
    }


def as_vectors(graph: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """``graph`` with each named rank-0 input or output declared [1], reshaped at the boundary."""
    g = graph.graph
    front: list[onnx.NodeProto] = []
    back: list[onnx.NodeProto] = []
    for value in g.input:
        if value.name in names:
            inner = value.name + SUFFIX
            _rename_uses(g, value.name, inner)
            front.append(_reshape(g, value.name, inner, []))
            _set_vector(value)
    for value in g.output:
        if value.name in names:
            inner = value.name + SUFFIX
            _rename_producer(g, value.name, inner)
            back.append(_reshape(g, inner, value.name, [1]))
            _set_vector(value)
    nodes = [*front, *g.node, *back]
    del g.node[:]
    g.node.extend(nodes)
    return graph


def _rank0(value: onnx.ValueInfoProto) -> bool:
    tt = value.type.tensor_type
    return tt.HasField("shape") and len(tt.shape.dim) == 0


def _set_vector(value: onnx.ValueInfoProto) -> None:
    value.type.tensor_type.shape.dim.add().dim_value = 1


def _reshape(g: onnx.GraphProto, src: str, dst: str, shape: list[int]) -> onnx.NodeProto:
    const = f"{dst}{SUFFIX}_shape"
    g.initializer.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), const))
    return helper.make_node("Reshape", [src, const], [dst], name=f"{dst}{SUFFIX}_reshape")


def _rename_uses(g: onnx.GraphProto, old: str, new: str) -> None:
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def _rename_producer(g: onnx.GraphProto, old: str, new: str) -> None:
    for node in g.node:
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
    _rename_uses(g, old, new)
