"""What an ONNX graph states about its tensors, filled into a spec entry that omits them.

A ``models:`` entry whose ``source`` is an ONNX graph (an .onnx file, or a factory returning an
``onnx.ModelProto`` or the path of one) needs no ``inputs`` / ``outputs``: names, dtypes and dims
come from the graph. ``dim_param``, unnamed dims and ``dim_value: -1`` are dynamic. The model
batches when the first axis of every input and output is dynamic; the spec may override any of it.
onnx is imported only when an entry leaves its tensors out.
"""

from __future__ import annotations

import importlib
import sys
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import SpecError
from builder.spec.kinds import ModelSourceKind, model_source_kind
from builder.spec.probe import probe_shapes

DEFAULT_MAX_BATCH_SIZE = 8
# A dynamic non-batch dim without samples to size it: profile min / opt / max.
DYNAMIC_MIN, DYNAMIC_OPT, DYNAMIC_MAX = 1, 64, 1024
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "fp32": {"min_cosine": 0.9999},
    "fp16": {"min_cosine": 0.999},
    "int8": {"min_cosine": 0.98},
    "int8_dynamic": {"min_cosine": 0.98},
    "bf16": {"min_cosine": 0.999},
}
# ONNX TensorProto element types by name, as Triton types (the spec's DType values).
_DTYPES = {
    "FLOAT": "FP32", "FLOAT16": "FP16", "DOUBLE": "FP64", "BOOL": "BOOL", "STRING": "STRING",
    "UINT8": "UINT8", "INT8": "INT8", "INT16": "INT16", "INT32": "INT32", "INT64": "INT64",
}  # fmt: skip


@dataclass(frozen=True)
class GraphTensor:
    name: str
    dtype: str  # a DType value, or the ONNX type's name when Triton has none
    shape: tuple[int, ...] | None  # -1 = dynamic; None = the graph gives no shape


@dataclass(frozen=True)
class GraphIO:
    inputs: list[GraphTensor]
    outputs: list[GraphTensor]
    opset: int
    model: Any = field(default=None, compare=False, repr=False)  # the onnx.ModelProto, for probes

    def batchable(self) -> bool:
        """The first axis of every input and output is dynamic."""
        tensors = self.inputs + self.outputs
        return all(t.shape is not None and t.shape and t.shape[0] == -1 for t in tensors)


def graph_io(model: Any) -> GraphIO:
    """Inputs (initializers excluded) and outputs of an ``onnx.ModelProto``."""
    from onnx import TensorProto

    weights = {init.name for init in model.graph.initializer}

    def tensor(value: Any) -> GraphTensor:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            return GraphTensor(value.name, kind or "unknown", None)
        tt = value.type.tensor_type
        name = TensorProto.DataType.Name(tt.elem_type)
        shape = None
        if tt.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim
            )
        return GraphTensor(value.name, _DTYPES.get(name, name), shape)

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return GraphIO(
        [tensor(v) for v in model.graph.input if v.name not in weights],
        [tensor(v) for v in model.graph.output],
        opset,
        model,
    )


def load_graph(source: str, spec_dir: Path, *, spec_file: Path, model: str) -> Any:
    """The ``onnx.ModelProto`` a source names (weights not loaded), or None for a factory that
    returns no graph (a torch module)."""
    import onnx

    if model_source_kind(source, checkpoint=False) is not ModelSourceKind.ONNX:
        made = _call_factory(source, spec_dir, spec_file=spec_file, model=model)
        if isinstance(made, onnx.ModelProto):
            return made
        if not (isinstance(made, (str, Path)) and str(made).endswith(".onnx")):
            return None
        source = str(made)
    path = Path(source) if Path(source).is_absolute() else spec_dir / source
    if not path.is_file():
        raise SpecError(f"ONNX file '{source}' not found", file=spec_file, model=model, field="source")
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: not an ONNX file
        raise SpecError(
            f"cannot read '{source}' as ONNX: {type(exc).__name__}",
            file=spec_file,
            model=model,
            field="source",
        ) from exc


def fill_from_graph(entry: dict[str, Any], spec_dir: Path, *, spec_file: Path) -> dict[str, Any]:
    """``entry`` with what it omits of inputs, outputs, max_batch_size, profiles and tolerances
    taken from its graph; unchanged when it states its tensors (or is not an ONNX source)."""
    source, name = entry.get("source"), str(entry.get("name", "?"))
    if not isinstance(source, str) or ("inputs" in entry and "outputs" in entry):
        return entry
    graph = load_graph(source, spec_dir, spec_file=spec_file, model=name)
    if graph is None:
        missing = "inputs" if "inputs" not in entry else "outputs"
        raise SpecError(
            "required field is missing (the source is not an ONNX graph, so the spec names its tensors)",
            file=spec_file,
            model=name,
            field=missing,
        )
    io = graph_io(graph)
    _refuse_non_tensors(io, entry, spec_file=spec_file, model=name)
    if isinstance(entry.get("sequence"), dict):  # a stateful model: its states' batch axes count too
        entry = {"max_batch_size": DEFAULT_MAX_BATCH_SIZE if io.batchable() else 0, **entry}
        io = without_server_tensors(io, entry["sequence"])
    return spec_entry(io, entry, sample_shapes(entry, spec_dir))


def _refuse_non_tensors(io: GraphIO, entry: dict[str, Any], *, spec_file: Path, model: str) -> None:
    """Triton serves tensors: a sequence or map the graph takes or returns is named in one line."""
    for side, tensors in (("inputs", io.inputs), ("outputs", io.outputs)):
        for t in tensors:
            if side not in entry and t.shape is None and t.dtype.endswith("_type"):
                raise SpecError(
                    f"graph {side[:-1]} '{t.name}' is a {t.dtype.removesuffix('_type')}, not a tensor; "
                    "Triton serves tensors only (sklearn converters: zipmap=False)",
                    file=spec_file,
                    model=model,
                    field=side,
                )


def without_server_tensors(io: GraphIO, sequence: dict[str, Any]) -> GraphIO:
    """The graph's tensors less a stateful model's states and controls, which the server feeds."""
    hidden: set[object] = set()
    for state in sequence.get("state") or []:
        if isinstance(state, dict):
            hidden |= {state.get("input"), state.get("output")}
    controls = sequence.get("controls")
    if isinstance(controls, dict):
        hidden |= {name for kind, name in controls.items() if kind != "dtype"}
    inputs = [t for t in io.inputs if t.name not in hidden]
    return replace(io, inputs=inputs, outputs=[t for t in io.outputs if t.name not in hidden])


def spec_entry(io: GraphIO, entry: dict[str, Any], samples: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """``entry`` completed from ``io``: what the spec states wins. A profile it fills has the
    samples' sizes as opt, else a shape ONNX Runtime runs (``builder.spec.probe``)."""
    out = dict(entry)
    batch = out.setdefault("max_batch_size", DEFAULT_MAX_BATCH_SIZE if io.batchable() else 0)
    skip = 1 if isinstance(batch, int) and batch > 0 else 0
    for side, tensors in (("inputs", io.inputs), ("outputs", io.outputs)):
        if side not in out:
            out[side] = [_tensor_entry(t, skip) for t in tensors]
    if "profiles" not in out:
        shapes, guessed = _profile_shapes(out["inputs"], samples)
        if guessed:
            shapes = probe_shapes(io, out, shapes, guessed)
        if shapes:
            out["profiles"] = [{"shapes": shapes}]
    if "tolerances" not in out:
        precisions = out.get("precisions", ["fp32"])
        if isinstance(precisions, list):
            out["tolerances"] = {p: DEFAULT_TOLERANCES[p] for p in precisions if p in DEFAULT_TOLERANCES}
    return out


def _tensor_entry(t: GraphTensor, skip: int) -> dict[str, Any]:
    """A spec tensor; a scalar is [1] (Triton has no rank 0 without a batch; the export reshapes)."""
    dims = list(t.shape[skip:]) if t.shape is not None else []
    return {"name": t.name, "dtype": t.dtype, "dims": dims or [1]}


def _profile_shapes(
    inputs: Any, samples: dict[str, tuple[int, ...]]
) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """min / opt / max for each input with dynamic dims: the samples' size as opt where known, else
    ``DYNAMIC_OPT``; and, per input, the axes so guessed."""
    shapes: dict[str, Any] = {}
    guessed: dict[str, list[int]] = {}
    for t in inputs if isinstance(inputs, list) else []:
        dims = t.get("dims") if isinstance(t, dict) else None
        if not isinstance(dims, list) or -1 not in dims:
            continue
        seen = samples.get(str(t.get("name")), ())
        opt = [seen[i] if len(seen) == len(dims) and d == -1 else d for i, d in enumerate(dims)]
        if len(seen) != len(dims):
            guessed[t["name"]] = [i for i, d in enumerate(dims) if d == -1]
        opt = [DYNAMIC_OPT if d == -1 else d for d in opt]
        shapes[t["name"]] = {
            "min": [DYNAMIC_MIN if d == -1 else d for d in dims],
            "opt": opt,
            "max": [max(DYNAMIC_MAX, o) if d == -1 else d for d, o in zip(dims, opt, strict=True)],
        }
    return shapes, guessed


def sample_shapes(entry: dict[str, Any], spec_dir: Path) -> dict[str, tuple[int, ...]]:
    """Per input, the shape of one sample (sample axis dropped) in the entry's .npz data, read from
    the arrays' headers; empty when there is none to read."""
    shapes: dict[str, tuple[int, ...]] = {}
    for section in ("calibration", "evaluation"):
        data = entry.get(section)
        path = data.get("data") if isinstance(data, dict) else None
        if isinstance(path, str) and path.endswith(".npz") and (spec_dir / path).is_file():
            shapes = _npz_shapes(spec_dir / path) | shapes
    return shapes


def _npz_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                with archive.open(member) as f:
                    version = np.lib.format.read_magic(f)  # type: ignore[no-untyped-call]
                    shape, _, _ = np.lib.format._read_array_header(f, version)  # type: ignore[attr-defined]
                shapes[member.removesuffix(".npy")] = tuple(shape[1:])
    except (OSError, ValueError, zipfile.BadZipFile):
        return {}  # the data stage reports what is wrong with the file
    return shapes


def _call_factory(ref: str, spec_dir: Path, *, spec_file: Path, model: str) -> object:
    module_name, _, attr = ref.partition(":")
    root = str(spec_dir.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"cannot import '{ref}': {exc}", file=spec_file, model=model, field="source") from exc
    try:
        return func()
    except Exception as exc:  # the factory is the user's code: report whatever it raised
        raise SpecError(
            f"{ref}() failed: {type(exc).__name__}: {exc}", file=spec_file, model=model, field="source"
        ) from exc
