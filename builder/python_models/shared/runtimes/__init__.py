"""The CPU runtimes a core model's graph is verified, timed and served on: one module each
(``base.CpuRuntime`` says what a runtime provides), registered in ``RUNTIMES``.

Adding a runtime is a module here and a line in ``RUNTIMES`` (docs/architecture.md, "Adding a
runtime"). This package is served too: ``onnx_runner`` and ``onnx_sequence`` link to it as their
``runtimes`` subpackage, so it imports nothing of the project.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import (
    PRECISION,
    ContainerBackend,
    CpuRuntime,
    Knobs,
    Runs,
    RuntimeRefused,
    Session,
    Sizing,
    instances,
)
from .onnxruntime import OnnxRuntime
from .openvino import OpenVino

__all__ = [
    "DEFAULT",
    "PRECISION",
    "RUNTIME",
    "RUNTIMES",
    "ContainerBackend",
    "CpuRuntime",
    "Knobs",
    "Runs",
    "RuntimeRefused",
    "Session",
    "Sizing",
    "instances",
    "open_served",
    "runtime",
]  # fmt: skip

RUNTIMES: dict[str, CpuRuntime] = {r.name: r for r in (OnnxRuntime(), OpenVino())}
DEFAULT = OnnxRuntime.name  # the runtime a variant's name leaves out (``int8``, ``bf16_openvino``)
RUNTIME = "runtime"  # the served model's parameter naming its runtime (unset: DEFAULT)


def runtime(name: str) -> CpuRuntime:
    """The runtime called ``name``; ValueError naming the registered ones otherwise."""
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime '{name}' (runtimes: {', '.join(RUNTIMES)})")
    return RUNTIMES[name]


def open_served(path: Path, params: Mapping[str, str], config: Mapping[str, Any]) -> Session:
    """The session a served model opens from its config's parameters: its runtime's, at its
    precision, as one of its instances."""
    chosen = runtime(params.get(RUNTIME, DEFAULT))
    return chosen.open(path, params.get(PRECISION, "fp32"), params, instances=instances(config))
