"""A model's signature from Triton's metadata and config, and checks of a request against it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from .errors import InvalidInput, InvalidResponse

Arrays = dict[str, NDArray[Any]]
_TRITON_DTYPES: dict[np.dtype[Any], str] = {}


def triton_dtype(dtype: np.dtype[Any]) -> str:
    """Triton's name of a numpy dtype ("BYTES" for object/bytes, "" if none), memoised."""
    name = _TRITON_DTYPES.get(dtype)
    if name is None:
        name = _TRITON_DTYPES[dtype] = "BYTES" if dtype.kind in "OSU" else np_to_triton_dtype(dtype) or ""
    return name


@dataclass(frozen=True)
class TensorInfo:
    name: str
    datatype: str  # Triton's name: INT32, FP32, BYTES, ...
    shape: tuple[int, ...]  # as in the metadata: with the batch dimension (-1) when the model batches
    optional: bool = False
    labels: bool = False  # has a label file (classification extension)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    max_batch_size: int
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    metadata: dict[str, Any] = field(repr=False)
    config: dict[str, Any] = field(repr=False)
    datatypes: dict[str, str] = field(default_factory=dict, repr=False)  # input name -> Triton dtype

    @classmethod
    def from_triton(cls, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> ModelInfo:
        """From `get_model_metadata` / `get_model_config` as JSON (gRPC's `as_json` or HTTP's dicts)."""
        config = config.get("config", config)  # gRPC wraps the config
        optional = {t["name"] for t in config.get("input", []) if t.get("optional")}
        labelled = {t["name"] for t in config.get("output", []) if t.get("label_filename")}

        def tensors(items: list[dict[str, Any]], flagged: set[str], key: str) -> dict[str, TensorInfo]:
            return {
                t["name"]: TensorInfo(
                    t["name"], t["datatype"], tuple(int(d) for d in t["shape"]), **{key: t["name"] in flagged}
                )
                for t in items
            }

        versions = metadata.get("versions") or [""]
        inputs = tensors(metadata.get("inputs", []), optional, "optional")
        return cls(
            name=metadata["name"],
            version=str(versions[-1]),
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=inputs,
            outputs=tensors(metadata.get("outputs", []), labelled, "labels"),
            metadata=dict(metadata),
            config=dict(config),
            datatypes={n: t.datatype for n, t in inputs.items()},
        )

    def check(self, arrays: Mapping[str, Any]) -> tuple[Arrays, int]:
        """The request's arrays (strings as object arrays) and its batch size (0 if the model does not
        batch); raises InvalidInput naming the first wrong input."""
        checked: Arrays = {}
        for name, value in arrays.items():
            spec = self.inputs.get(name)
            if spec is None:
                raise InvalidInput(
                    f"model '{self.name}' has no input '{name}' (inputs: {', '.join(self.inputs)})"
                )
            checked[name] = self._check_tensor(spec, value)
        missing = [n for n, t in self.inputs.items() if n not in checked and not t.optional]
        if missing:
            raise InvalidInput(f"model '{self.name}' needs input(s) {', '.join(missing)}")
        return checked, self._batch_size(checked)

    def _check_tensor(self, spec: TensorInfo, value: Any) -> NDArray[Any]:
        array = value if type(value) is np.ndarray else np.asarray(value)
        got = triton_dtype(array.dtype)
        if got != spec.datatype:
            where = f"input '{spec.name}' of model '{self.name}'"
            if spec.datatype != "BYTES":
                expected = np.dtype(triton_to_np_dtype(spec.datatype))
                raise InvalidInput(f"{where} is {spec.datatype} ({expected}), got dtype {array.dtype}")
            if array.dtype.kind not in "OSU":
                raise InvalidInput(f"{where} is BYTES (str/bytes), got dtype {array.dtype}")
        if array.dtype.kind == "U":
            array = array.astype(object)
        if not _fits(spec.shape, array.shape):
            where = f"input '{spec.name}' of model '{self.name}'"
            raise InvalidInput(f"{where} has shape {list(spec.shape)}, got {list(array.shape)}")
        return array

    def _batch_size(self, arrays: Arrays) -> int:
        if self.max_batch_size <= 0 or not arrays:
            return 0
        size = -1
        for array in arrays.values():
            if size not in (-1, array.shape[0]):
                sizes = {n: a.shape[0] for n, a in arrays.items()}
                raise InvalidInput(f"inputs of model '{self.name}' differ in batch size: {sizes}")
            size = array.shape[0]
        if size < 1:
            raise InvalidInput(f"model '{self.name}' got an empty batch")
        return int(size)

    def output_shape(self, name: str, batch: int) -> tuple[int, ...] | None:
        """The output's shape for a batch, or None if it has dynamic dimensions."""
        shape = self.outputs[name].shape
        if self.max_batch_size > 0:
            shape = (batch, *shape[1:])
        return None if any(d < 0 for d in shape) else shape


def check_outputs(info: ModelInfo, outputs: Arrays, batch: int) -> Arrays:
    """Raise InvalidResponse when an output's shape differs from the model's declaration."""
    for name, array in outputs.items():
        want = info.output_shape(name, batch) if name in info.outputs else None
        if want is not None and array is not None and tuple(array.shape) != want:
            raise InvalidResponse(
                f"model '{info.name}' returned output '{name}' of shape {list(array.shape)}, "
                f"declared {list(want)}"
            )
    return outputs


def _fits(want: tuple[int, ...], got: tuple[int, ...]) -> bool:
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):  # noqa: B905, SIM110 (lengths checked; a loop is faster here)
        if w != g and w != -1:
            return False
    return True


def split(arrays: Arrays, size: int) -> list[Arrays]:
    """Consecutive slices of at most `size` along the batch dimension."""
    total = next(iter(arrays.values())).shape[0]
    return [{n: a[i : i + size] for n, a in arrays.items()} for i in range(0, total, size)]


def join(parts: list[Arrays]) -> Arrays:
    """The outputs of consecutive slices, concatenated in order."""
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
