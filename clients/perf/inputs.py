"""A served model's inputs, the --shape each dynamic one needs, and --input-data JSON."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from clients.perf.errors import PerfError
from clients.perf.runner import host_port


@dataclass(frozen=True)
class ServedInput:
    name: str
    datatype: str  # config spelling without TYPE_: FP32, STRING, ...
    dims: list[int]  # without the batch dimension
    optional: bool = False

    @property
    def dynamic(self) -> bool:
        return -1 in self.dims


@dataclass(frozen=True)
class ServedModel:
    name: str
    max_batch_size: int
    inputs: list[ServedInput]
    decoupled: bool = False

    @property
    def is_llm(self) -> bool:
        """Served like Triton's vLLM backend: decoupled, with a ``text_input`` string input."""
        return self.decoupled and any(t.name == "text_input" and t.datatype == "STRING" for t in self.inputs)


def served_model(url: str, model: str, protocol: str = "http") -> ServedModel:
    """Read the model's config from the server (what perf_analyzer will see)."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            config = grpcclient.InferenceServerClient(host_port(url)).get_model_config(model, as_json=True)
            config = config.get("config", config)
        else:
            import tritonclient.http as httpclient

            config = httpclient.InferenceServerClient(host_port(url)).get_model_config(model)
    except Exception as exc:  # tritonclient raises its own exception types per protocol
        raise PerfError(f"cannot read the config of model '{model}' from {url}: {exc}") from exc
    return _from_config(model, config)


def _from_config(model: str, config: Mapping[str, Any]) -> ServedModel:
    inputs = [
        ServedInput(
            name=t["name"],
            datatype=str(t.get("data_type", "")).removeprefix("TYPE_"),
            dims=[int(d) for d in t.get("dims", [])],
            optional=bool(t.get("optional", False)),
        )
        for t in config.get("input", [])
    ]
    decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
    return ServedModel(model, int(config.get("max_batch_size", 0)), inputs, decoupled)


def resolve_shapes(
    served: ServedModel,
    shapes: Mapping[str, list[int]] | None,
    input_data: Path | None = None,
) -> dict[str, list[int]]:
    """--shape for every dynamic input; a clear error names each input still missing one."""
    shapes = dict(shapes or {})
    by_name = {t.name: t for t in served.inputs}
    for name, dims in shapes.items():
        if name not in by_name:
            raise PerfError(f"model '{served.name}' has no input '{name}' (inputs: {sorted(by_name)})")
        _check_rank(served.name, by_name[name], dims)
    shaped_in_data = data_shapes(input_data) if input_data else set()
    missing = [
        t for t in served.inputs if t.dynamic and t.name not in shapes and t.name not in shaped_in_data
    ]
    if missing:
        need = ", ".join(f"'{t.name}' (dims {t.dims})" for t in missing)
        example = " ".join(
            f"--shape {t.name}:{','.join('N' if d == -1 else str(d) for d in t.dims)}" for t in missing
        )
        noun = "input" if len(missing) == 1 else "inputs"
        raise PerfError(
            f"model '{served.name}': {noun} {need} with dynamic dims need a shape; pass {example} "
            "(sizes without the batch dimension) or an --input-data file with a 'shape' per tensor"
        )
    # Shapes the input data gives win: perf_analyzer refuses data that disagrees with --shape.
    return {k: v for k, v in shapes.items() if by_name[k].dynamic and k not in shaped_in_data}


def _check_rank(model: str, tensor: ServedInput, dims: list[int]) -> None:
    ok = len(dims) == len(tensor.dims) and all(
        d >= 1 and (want == -1 or want == d) for d, want in zip(dims, tensor.dims, strict=False)
    )
    if not ok:
        raise PerfError(
            f"model '{model}': shape {dims} for input '{tensor.name}' does not fit its dims {tensor.dims} "
            "(give sizes without the batch dimension)"
        )


def data_shapes(path: Path) -> set[str]:
    """Inputs whose every entry in an --input-data JSON carries its own 'shape'."""
    entries = json.loads(Path(path).read_text()).get("data", [])
    flat = [e for item in entries for e in (item if isinstance(item, list) else [item])]
    if not flat:
        return set()
    names = set(flat[0])
    return {n for n in names if all(isinstance(e.get(n), dict) and "shape" in e[n] for e in flat)}


# --input-data JSON (perf_analyzer's "Real Input Data" format, one entry per batch-1 request)


def string_entries(name: str, texts: Iterable[str]) -> list[dict[str, Any]]:
    """One STRING element per request, e.g. real sentences."""
    return [{name: {"content": [t], "shape": [1]}} for t in texts]


def bytes_entries(name: str, blobs: Iterable[bytes]) -> list[dict[str, Any]]:
    """One BYTES element per request (e.g. encoded images): b64 of the 4-byte length + bytes."""
    return [{name: {"content": {"b64": _b64(struct.pack("<I", len(b)) + b)}, "shape": [1]}} for b in blobs]


def array_entries(arrays: Mapping[str, NDArray[Any]], limit: int | None = None) -> list[dict[str, Any]]:
    """Numeric samples (first axis = samples) as little-endian b64 with their shapes."""
    count = min(len(a) for a in arrays.values())
    count = min(count, limit) if limit else count
    return [
        {
            name: {"content": {"b64": _b64(_little_endian(arr[i]).tobytes())}, "shape": list(arr[i].shape)}
            for name, arr in arrays.items()
        }
        for i in range(count)
    ]


def write_input_data(
    entries: list[dict[str, Any]], path: Path, validation: list[dict[str, Any]] | None = None
) -> Path:
    """Write the JSON; ``validation`` (expected outputs, aligned with entries) makes
    perf_analyzer check every response."""
    if not entries:
        raise PerfError(f"no samples to write into {path}")
    doc: dict[str, Any] = {"data": entries}
    if validation is not None:
        doc["validation_data"] = validation
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _little_endian(a: NDArray[Any]) -> NDArray[Any]:
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
