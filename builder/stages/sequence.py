"""Stateful models: their states and controls held against the graph, and a sequence run in a loop.

Evaluation samples of a stateful model are the chunks of one sequence, in order. The reference and
every variant run them one chunk per call with the states carried from each call's state outputs
to the next call's state inputs, starting from the states' initial values: what the server does
for one sequence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray

from builder.dtypes import FROM_ONNX, to_numpy
from builder.errors import SpecError
from builder.python_models.shared.runtimes import Session
from builder.spec import ModelSpec, TensorSpec
from builder.spec.sequence import SequenceSpec
from builder.stages.graph_tensors import tensor_problem


def compare_states(model: ModelSpec, graph: onnx.ModelProto, *, spec_file: Path) -> None:
    """Each state's input and output, and each control, exist in the graph with the spec's type and shape."""
    seq = model.sequence
    assert seq is not None
    inputs = {v.name: v for v in graph.graph.input}
    outputs = {v.name: v for v in graph.graph.output}
    for i, s in enumerate(seq.state):
        for side, name, values in (("input", s.input, inputs), ("output", s.output, outputs)):
            where = f"sequence.state[{i}]"
            if name not in values:
                raise SpecError(f"graph has no {side} '{name}' (graph {side}s: {sorted(values)})",
                                file=spec_file, model=model.name, field=f"{where}.{side}")  # fmt: skip
            problem = tensor_problem(model, TensorSpec(name=name, dtype=s.dtype, dims=s.dims), values[name])
            if problem is not None:
                field, message = problem
                raise SpecError(f"state {side} '{name}': {message}", file=spec_file, model=model.name,
                                field=field if field == "max_batch_size" else f"{where}.{field}")  # fmt: skip
    for kind, name in seq.controls.names().items():
        _compare_control(model, kind, name, inputs, spec_file)


def _compare_control(
    model: ModelSpec, kind: str, name: str, inputs: dict[str, onnx.ValueInfoProto], spec_file: Path
) -> None:
    assert model.sequence is not None
    field = f"sequence.controls.{kind}"
    if name not in inputs:
        raise SpecError(f"graph has no input '{name}' (graph inputs: {sorted(inputs)})",
                        file=spec_file, model=model.name, field=field)  # fmt: skip
    said = FROM_ONNX.get(inputs[name].type.tensor_type.elem_type)
    wanted = model.sequence.controls.dtype
    if said is not wanted:
        graph = said.value if said else "an unsupported type"
        raise SpecError(f"graph input '{name}' is {graph}, controls.dtype says {wanted.value}",
                        file=spec_file, model=model.name, field="sequence.controls.dtype")  # fmt: skip


def initial_states(model: ModelSpec, seq: SequenceSpec, batch: int = 1) -> dict[str, NDArray[Any]]:
    """Each state input's value at the start of ``batch`` sequences (one where the model does not batch)."""
    lead = [batch] if model.batched else []
    return {s.input: np.zeros(lead + s.dims, dtype=to_numpy(s.dtype)) for s in seq.state}


def controls(
    model: ModelSpec, seq: SequenceSpec, *, start: bool, end: bool, batch: int = 1
) -> dict[str, NDArray[Any]]:
    """The control inputs the graph reads, as the sequence batcher sets them for a request."""
    shape = [batch, 1] if model.batched else [1]
    flags = {"start": start, "end": end, "ready": True}
    dtype = to_numpy(seq.controls.dtype)
    return {name: np.full(shape, flags[kind], dtype=dtype) for kind, name in seq.controls.names().items()}


def run_sequence(sess: Session, model: ModelSpec, inputs: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """The model's outputs over the samples as one sequence (sample axis first), states carried."""
    seq = model.sequence
    assert seq is not None
    names = [o.name for o in model.outputs]
    state_names = [s.output for s in seq.state]
    state = initial_states(model, seq)
    count = next(iter(inputs.values())).shape[0]
    parts: list[list[NDArray[Any]]] = []
    for step in range(count):
        chunk = {k: v[step : step + 1] if model.batched else v[step] for k, v in inputs.items()}
        feed = chunk | state | controls(model, seq, start=step == 0, end=step == count - 1)
        got = sess.run(names + state_names, feed)
        outs = got[: len(names)]
        parts.append(outs if model.batched else [o[np.newaxis] for o in outs])
        state = {s.input: value for s, value in zip(seq.state, got[len(names) :], strict=True)}
    return {name: np.concatenate([p[i] for p in parts]) for i, name in enumerate(names)}


def first_step_feed(model: ModelSpec, feed: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """A feed of the model's own inputs completed with what the server adds on a sequence's first request."""
    seq = model.sequence
    if seq is None:
        return feed
    batch = next(iter(feed.values())).shape[0] if model.batched else 1
    return feed | initial_states(model, seq, batch) | controls(model, seq, start=True, end=False, batch=batch)
