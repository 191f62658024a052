"""Plausible values for synthetic inputs, from what a tensor's name and its graph say it holds.

A model verified without evaluation data is run on synthetic samples: floats are seeded
standard-normal noise; integers follow the input's name, since zeros everywhere make an attention
mask that masks every token. Token ids lie in the vocabulary (the first dim of the table a Gather
indexes with the input, read from the graph), masks are ones, token-type and segment ids zeros,
positions count 0..n-1 along the last axis, a sample rate is 16000; other integers stay zeros
(often sizes or indices).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

SAMPLE_RATE = 16000
# Ops between an integer input and the Gather that reads the embedding table with it.
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity"}


def synthetic_array(
    name: str, dtype: DTypeLike, shape: list[int], rng: np.random.Generator, vocab: int | None = None
) -> NDArray[Any]:
    """One input's values at ``shape`` (a numpy ``dtype``)."""
    dt = np.dtype(dtype)
    if dt.kind in "OSU":
        return np.full(shape, "", dtype=np.object_)
    if dt.kind in "fc":
        return rng.standard_normal(shape).astype(dt)
    kind = _kind(name)
    if kind == "mask":
        return np.ones(shape, dtype=dt)
    if kind == "position" and shape:
        return np.broadcast_to(np.arange(shape[-1]), shape).astype(dt)
    if kind == "rate" and dt.kind in "iu" and np.iinfo(dt).max >= SAMPLE_RATE:
        return np.full(shape, SAMPLE_RATE, dtype=dt)
    if kind == "ids" and vocab is not None and vocab > 1 and dt.kind in "iu":
        high = min(vocab, int(np.iinfo(dt).max) + 1)
        return rng.integers(0, high, size=shape).astype(dt)
    return np.zeros(shape, dtype=dt)


def _kind(name: str) -> str:
    low = name.lower()
    if "mask" in low:
        return "mask"
    if "type" in low or "segment" in low:
        return "zeros"
    if "position" in low or "pos_id" in low:
        return "position"
    if "sample_rate" in low or "sampling_rate" in low or low == "sr":
        return "rate"
    return "ids"


def token_ranges(model: Any) -> dict[str, int]:
    """Per graph input, the size of the table a Gather indexes with it, where one does (the smallest
    when several do): the vocabulary of a token-id input. ``model`` is an ``onnx.ModelProto``."""
    graph = model.graph
    tables = {init.name: list(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            tables[node.output[0]] = list(node.attribute[0].t.dims)
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    ranges: dict[str, int] = {}
    for value in graph.input:
        sizes = _gathered_sizes(value.name, readers, tables)
        if sizes:
            ranges[value.name] = min(sizes)
    return ranges


def _gathered_sizes(name: str, readers: dict[str, list[Any]], tables: dict[str, list[int]]) -> list[int]:
    """Table sizes along the gathered axis of the Gathers reached from ``name`` through
    shape-only ops (a few steps at most)."""
    sizes: list[int] = []
    frontier, seen = [name], {name}
    for _ in range(4):
        following: list[str] = []
        for tensor in frontier:
            for node in readers.get(tensor, []):
                if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                    dims = tables.get(node.input[0])
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    if dims and -len(dims) <= axis < len(dims):
                        sizes.append(dims[axis])
                elif node.op_type in _PASS_THROUGH and node.input[0] == tensor:
                    following += [o for o in node.output if o not in seen]
        seen.update(following)
        frontier = following
    return sizes
