"""What the sync and asyncio clients share: URLs, tritonclient modules, request and result objects."""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping, Sequence
from types import ModuleType
from typing import Any

from .model import Arrays

PROTOCOLS = ("grpc", "http")
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def parse_url(url: str, protocol: str | None = None) -> tuple[str, str]:
    """(`host:port`, protocol) from `host:port`, `grpc://host:port` or `http://host:port`."""
    scheme, sep, rest = url.partition("://")
    address = rest if sep else url
    if protocol is None:
        protocol = "http" if sep and scheme in ("http", "https") else "grpc"
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    return address.rstrip("/"), protocol


def is_local(address: str) -> bool:
    """Whether the server shares this host's /dev/shm (loopback address)."""
    return address.rsplit(":", 1)[0] in LOOPBACK


def module(protocol: str, aio: bool = False) -> ModuleType:
    """tritonclient.grpc / .http, or their .aio variants."""
    return importlib.import_module(f"tritonclient.{protocol}" + (".aio" if aio else ""))


def make_inputs(
    mod: ModuleType, types: Mapping[str, str], arrays: Arrays, skip: Collection[str]
) -> list[Any]:
    """InferInputs carrying the arrays, except those in `skip` (shared memory is attached later)."""
    inputs = []
    for name, array in arrays.items():
        tensor = mod.InferInput(name, list(array.shape), types[name])
        if name not in skip:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def make_outputs(mod: ModuleType, names: Sequence[str], class_count: int) -> list[Any]:
    return [mod.InferRequestedOutput(name, class_count=class_count) for name in names]


def as_json(protocol: str) -> dict[str, Any]:
    """Keyword arguments making metadata/config calls return JSON-like dicts for both protocols."""
    return {"as_json": True} if protocol == "grpc" else {}
