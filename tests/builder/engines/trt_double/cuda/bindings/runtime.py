"""TEST DOUBLE of ``cuda.bindings.runtime``: the two calls device detection makes.

``TRT_DOUBLE_GPU="NVIDIA A10:8.6"`` is one visible device; unset, there is none
(cudaErrorNoDevice). ``CUDA_VISIBLE_DEVICES=""`` hides it, as it hides real ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class cudaError_t:
    value: int
    name: str

    def __int__(self) -> int:
        return self.value


SUCCESS = cudaError_t(0, "cudaSuccess")
NO_DEVICE = cudaError_t(100, "cudaErrorNoDevice")


@dataclass(frozen=True)
class cudaDeviceProp:
    name: bytes
    major: int
    minor: int


def _device() -> cudaDeviceProp | None:
    spec = os.environ.get("TRT_DOUBLE_GPU")
    if not spec or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    name, _, cc = spec.rpartition(":")
    major, _, minor = cc.partition(".")
    return cudaDeviceProp(name.encode() + b"\0" * 8, int(major), int(minor))


def cudaGetDeviceCount() -> tuple[cudaError_t, int]:
    return (SUCCESS, 1) if _device() else (NO_DEVICE, 0)


def cudaGetDeviceProperties(device: int) -> tuple[cudaError_t, cudaDeviceProp | None]:
    found = _device()
    return (SUCCESS, found) if found and device == 0 else (NO_DEVICE, None)
