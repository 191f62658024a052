"""The shared-memory plan of one request: which tensors travel through system shared memory, in
which region, at which offsets; and the names regions get in /dev/shm. No I/O here: `regions`
creates, fills, registers and removes what a plan describes.

Only fixed-size tensors travel through shared memory; strings, classification results and outputs
with dynamic dimensions travel in the request/response as usual.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from .model import Arrays, ModelInfo

ALIGN = 64
PREFIX = "tritonforge_"


def aligned(n: int) -> int:
    """`n` rounded up to the alignment of a slot's offset."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Slot:
    name: str
    offset: int
    nbytes: int
    shape: tuple[int, ...] = ()
    dtype: np.dtype[Any] | None = None


@dataclass
class Region:
    """A region of a plan; `key` is its /dev/shm name. `handle` and `registered` are filled in by
    `regions` while the region exists."""

    name: str
    size: int
    handle: Any = None
    registered: bool = False

    @property
    def key(self) -> str:
        return "/" + self.name


@dataclass
class Plan:
    inputs: list[Slot] = field(default_factory=list)
    outputs: list[Slot] = field(default_factory=list)
    input_region: Region | None = None
    output_region: Region | None = None

    def regions(self) -> list[Region]:
        return [r for r in (self.input_region, self.output_region) if r is not None]

    def input_names(self) -> set[str]:
        return {s.name for s in self.inputs}


def layout(slots: list[Slot]) -> int:
    """Give each slot its aligned offset; the region size they need."""
    offset = 0
    for slot in slots:
        slot.offset = offset
        offset += aligned(slot.nbytes)
    return offset


def _new_region(size: int) -> Region:
    return Region(f"{own_prefix()}{uuid.uuid4().hex[:16]}", size)


def plan(info: ModelInfo, arrays: Arrays, outputs: Sequence[str], batch: int, class_count: int) -> Plan:
    """Which tensors go through shared memory, at which offsets."""
    result = Plan()
    result.inputs = [Slot(n, 0, a.nbytes) for n, a in arrays.items() if a.dtype != object and a.nbytes]
    for name in outputs if not class_count else []:
        shape, datatype = info.output_shape(name, batch), info.outputs[name].datatype
        if shape is not None and datatype != "BYTES":
            dtype = np.dtype(triton_to_np_dtype(datatype))
            result.outputs.append(Slot(name, 0, int(np.prod(shape)) * dtype.itemsize, shape, dtype))
    if result.inputs:
        result.input_region = _new_region(layout(result.inputs))
    if result.outputs:
        result.output_region = _new_region(layout(result.outputs))
    return result


def attach(plan: Plan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    """Point the tritonclient InferInput / InferRequestedOutput objects at their slots."""
    by_name = {t.name(): t for t in [*inputs, *outputs]}
    if plan.input_region is not None:
        for slot in plan.inputs:
            by_name[slot.name].set_shared_memory(plan.input_region.name, slot.nbytes, slot.offset)
    if plan.output_region is not None:
        for slot in plan.outputs:
            by_name[slot.name].set_shared_memory(plan.output_region.name, slot.nbytes, slot.offset)


def own_prefix(pid: int | None = None) -> str:
    """The name prefix of the regions a process creates."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}_"


def leftover_keys(pid: int | None = None) -> list[str]:
    """Regions a process (this one by default) left in /dev/shm: for checks and clean-up tools."""
    root, prefix = "/dev/shm", own_prefix(pid)
    return sorted(n for n in os.listdir(root) if n.startswith(prefix)) if os.path.isdir(root) else []
