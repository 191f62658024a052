"""A profile's opt shape that ONNX Runtime runs, for dynamic dims that nothing sized.

A dynamic non-batch dim without samples gets ``DYNAMIC_OPT`` as its profile's opt, and the
synthetic samples the variants are verified on take that shape. Some graphs need more (an audio
front-end's window of 512 samples): the guessed dims are doubled until ONNX Runtime runs the graph
on synthetic inputs, within the profile's max, and the profile's min and opt become that shape.
What was tried is kept per model and graph for the build log (``probe_record``). A graph that
ONNX Runtime cannot load, whose inputs the probe cannot make, or whose weights are external or
over ``PROBE_MAX_BYTES`` is left as guessed: the reference stage reports what fails. The probe
costs a session and one run per spec load (once per process), only for entries that leave a
dynamic dim to the guess.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from builder.spec.synthetic import synthetic_array, token_ranges


class Graph(Protocol):
    """What the probe reads of ``builder.spec.graph.GraphIO``."""

    @property
    def inputs(self) -> list[Any]: ...  # GraphTensor: name, dtype (a DType value), shape

    @property
    def model(self) -> Any: ...  # the onnx.ModelProto


_NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "STRING": np.object_,
}  # fmt: skip
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
SMALL_INITIALIZER = 1024
# A larger graph is left as guessed: each load of the spec would load it into ONNX Runtime.
PROBE_MAX_BYTES = 512 << 20  # elements: shape constants and the like, which decide what runs


@dataclass(frozen=True)
class Probe:
    """The shapes ONNX Runtime was tried on, for a graph that did not run at the first guess."""

    opt: dict[str, list[int]]  # the probed inputs' opt: the one that ran, else the first guess
    refused: list[dict[str, list[int]]]  # each shape tried that did not run, in order
    ran: bool
    error: str  # ONNX Runtime's first line on the last shape refused

    def describe(self) -> str:
        if self.ran:
            return (
                f"dynamic dims probed with ONNX Runtime: synthetic samples and the profile's min and opt "
                f"at {_shapes([self.opt])} ({_shapes(self.refused)} did not run); `profiles:` sets others"
            )
        return (
            "synthetic samples at a guessed shape do not run (give `evaluation:` data, or `profiles:` "
            f"with shapes the model runs): ONNX Runtime refused {_shapes(self.refused)}: {self.error}"
        )


def _shapes(tried: list[dict[str, list[int]]]) -> str:
    """``x [64], [128]`` for one input; ``x [64] + y [8, 64]; ...`` for several."""
    if len({name for shapes in tried for name in shapes}) == 1:
        return f"{next(iter(tried[0]))} " + ", ".join(str(next(iter(s.values()))) for s in tried)
    return "; ".join(" + ".join(f"{name} {dims}" for name, dims in s.items()) for s in tried)


# (model name, graph digest) -> what the last probe of that graph in this process found.
_RECORDS: dict[tuple[str, str], Probe] = {}
# (graph digest, feed signature) -> the opt that ran (None: none did): a spec loaded again probes once.
_RESULTS: dict[tuple[str, str], tuple[dict[str, list[int]], Probe | None]] = {}


def probe_record(path: Path, model: str) -> Probe | None:
    """What probing ``path``'s graph for ``model`` found, when its first guess did not run."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception:  # the export stage has read it already; nothing to say here
        return None
    return _RECORDS.get((model, digest(graph)))


def probe_shapes(
    io: Graph,
    entry: dict[str, Any],
    shapes: dict[str, Any],
    guessed: dict[str, list[int]],
) -> dict[str, Any]:
    """``shapes`` (input -> min / opt / max) with the ``guessed`` axes of min and opt grown to a
    shape ONNX Runtime runs; unchanged when the first guess runs or nothing can be probed."""
    if io.model is None or isinstance(entry.get("sequence"), dict) or _too_big(io.model):
        return shapes
    batching = isinstance(entry.get("max_batch_size"), int) and entry["max_batch_size"] > 0
    key = (digest(io.model), repr((sorted(shapes.items()), sorted(guessed.items()), batching)))
    if key not in _RESULTS:
        _RESULTS[key] = _probe(io, shapes, guessed, batching)
    opt, probe = _RESULTS[key]
    _RECORDS.pop((str(entry.get("name")), key[0]), None)
    if probe is None:
        return shapes
    _RECORDS[(str(entry.get("name")), key[0])] = probe
    if not probe.ran:
        return shapes
    return shapes | {name: _raised(shapes[name], dims, guessed[name]) for name, dims in opt.items()}


def _raised(rng: dict[str, Any], opt: list[int], axes: list[int]) -> dict[str, Any]:
    """min / opt / max with ``opt`` as opt, and as min on the probed ``axes``."""
    low = [o if i in axes else m for i, (o, m) in enumerate(zip(opt, rng["min"], strict=True))]
    return {**rng, "min": low, "opt": opt}


def _probe(
    io: Graph, shapes: dict[str, Any], guessed: dict[str, list[int]], batching: bool
) -> tuple[dict[str, list[int]], Probe | None]:
    session = _session(io.model)
    current = {name: list(shapes[name]["opt"]) for name in guessed}
    if session is None:
        return current, None
    ranges = token_ranges(io.model)
    refused: list[dict[str, list[int]]] = []
    while True:
        feed = _feed(io, {name: r["opt"] for name, r in shapes.items()} | current, batching, ranges)
        if feed is None:
            return current, None
        error = _run(session, feed)
        if error is None:
            break
        refused.append(current)
        grown = {n: [d * 2 if i in guessed[n] else d for i, d in enumerate(ds)] for n, ds in current.items()}
        if any(d > shapes[name]["max"][i] for name, dims in grown.items() for i, d in enumerate(dims)):
            first = refused[0]
            return first, Probe(first, refused, ran=False, error=error)
        current = grown
    if not refused:
        return current, None
    return current, Probe(current, refused, ran=True, error="")


def _feed(
    io: Graph, opt: dict[str, list[int]], batching: bool, ranges: dict[str, int]
) -> dict[str, NDArray[Any]] | None:
    """Synthetic inputs for one run (a batch of one where the model batches), or None when the
    graph's inputs do not fit the profile's shapes."""
    rng = np.random.default_rng(0)
    feed: dict[str, NDArray[Any]] = {}
    for t in io.inputs:
        dtype = _NUMPY.get(t.dtype)
        if dtype is None or t.shape is None:
            return None
        dims = opt.get(t.name, [d for d in t.shape[1 if batching else 0 :]])
        shape = ([1] if batching else []) + list(dims) if t.shape else []
        if len(shape) != len(t.shape) or any(d < 1 for d in shape):
            return None
        feed[t.name] = synthetic_array(t.name, dtype, shape, rng, ranges.get(t.name))
    return feed


def _session(model: Any) -> Any:
    """An ONNX Runtime session that logs nothing (refusals are expected here), or None."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # not loadable as it is: the reference stage says why
        return None


def _run(session: Any, feed: dict[str, NDArray[Any]]) -> str | None:
    """None when the graph runs on ``feed``, else the first line of ONNX Runtime's refusal."""
    try:
        session.run(None, feed)
    except Exception as exc:  # ORT raises its own exception types for shapes it cannot run
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return _ORT_PREFIX.sub("", lines[0])[:200] if lines else type(exc).__name__
    return None


def _too_big(model: Any) -> bool:
    """Weights in external files (not loaded here), or more than a spec load should load."""
    from onnx import TensorProto

    external = any(init.data_location == TensorProto.EXTERNAL for init in model.graph.initializer)
    return external or int(model.ByteSize()) > PROBE_MAX_BYTES


def digest(model: Any) -> str:
    """The graph's nodes, inputs and outputs and its small initializers: what decides which shapes run."""
    graph = model.graph
    h = hashlib.sha256()
    for part in [*graph.input, *graph.output, *graph.node]:
        h.update(part.SerializeToString())
    for init in graph.initializer:
        h.update(f"{init.name}:{init.data_type}:{list(init.dims)}".encode())
        if int(np.prod(init.dims)) <= SMALL_INITIALIZER:
            h.update(init.SerializeToString())
    return h.hexdigest()
