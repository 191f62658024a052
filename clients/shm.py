"""System shared memory for one request: an input region and an output region, registered with the
server for the request only, then always unregistered and unlinked, also on errors.

Only fixed-size tensors travel through shared memory; strings, classification results and outputs
with dynamic dimensions travel in the request/response as usual.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as sysshm
from tritonclient.utils import triton_to_np_dtype

from .errors import SharedMemoryError
from .model import Arrays, ModelInfo

ALIGN = 64
PREFIX = "tritonforge_"


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Slot:
    name: str
    offset: int
    nbytes: int
    shape: tuple[int, ...] = ()
    dtype: Any = None


@dataclass
class Region:
    """A created (and maybe registered) region; `key` is its /dev/shm name."""

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


def _layout(slots: list[Slot]) -> int:
    offset = 0
    for slot in slots:
        slot.offset = offset
        offset += _aligned(slot.nbytes)
    return offset


def _new_region(size: int) -> Region:
    return Region(f"{own_prefix()}{uuid.uuid4().hex[:16]}", size)


def plan(info: ModelInfo, arrays: Arrays, outputs: list[str], batch: int, class_count: int) -> Plan:
    """Which tensors go through shared memory, at which offsets."""
    result = Plan()
    result.inputs = [Slot(n, 0, a.nbytes) for n, a in arrays.items() if a.dtype != object and a.nbytes]
    for name in outputs if not class_count else []:
        shape, datatype = info.output_shape(name, batch), info.outputs[name].datatype
        if shape is not None and datatype != "BYTES":
            dtype = np.dtype(triton_to_np_dtype(datatype))
            result.outputs.append(Slot(name, 0, int(np.prod(shape)) * dtype.itemsize, shape, dtype))
    if result.inputs:
        result.input_region = _new_region(_layout(result.inputs))
    if result.outputs:
        result.output_region = _new_region(_layout(result.outputs))
    return result


def _create(plan: Plan, arrays: Arrays) -> None:
    for region in plan.regions():
        try:
            region.handle = sysshm.create_shared_memory_region(
                region.name, region.key, region.size, create_only=True
            )
        except sysshm.SharedMemoryException as exc:
            raise SharedMemoryError(f"cannot create shared memory {region.key}: {exc}") from exc
    if plan.input_region is not None:
        for slot in plan.inputs:
            sysshm.set_shared_memory_region(plan.input_region.handle, [arrays[slot.name]], offset=slot.offset)


def _destroy(region: Region) -> None:
    if region.handle is not None:
        with contextlib.suppress(Exception):
            sysshm.destroy_shared_memory_region(region.handle)
        region.handle = None


def attach(plan: Plan, inputs: list[Any], outputs: list[Any]) -> None:
    """Point the tritonclient InferInput / InferRequestedOutput objects at their slots."""
    by_name = {t.name(): t for t in [*inputs, *outputs]}
    if plan.input_region is not None:
        for slot in plan.inputs:
            by_name[slot.name].set_shared_memory(plan.input_region.name, slot.nbytes, slot.offset)
    if plan.output_region is not None:
        for slot in plan.outputs:
            by_name[slot.name].set_shared_memory(plan.output_region.name, slot.nbytes, slot.offset)


def read_outputs(plan: Plan) -> Arrays:
    """Copies of the outputs written to the output region (copies: the region is unlinked next)."""
    if plan.output_region is None:
        return {}
    handle = plan.output_region.handle
    return {
        s.name: sysshm.get_contents_as_numpy(handle, s.dtype, s.shape, s.offset).copy() for s in plan.outputs
    }


@contextlib.contextmanager
def registered(raw: Any, plan: Plan, arrays: Arrays) -> Iterator[Plan]:
    """Create, fill and register the plan's regions with a sync tritonclient client; undo on exit."""
    try:
        _create(plan, arrays)
        for region in plan.regions():
            raw.register_system_shared_memory(region.name, region.key, region.size)
            region.registered = True
        yield plan
    finally:
        for region in plan.regions():
            if region.registered:
                with contextlib.suppress(Exception):
                    raw.unregister_system_shared_memory(region.name)
            _destroy(region)


@contextlib.asynccontextmanager
async def aregistered(raw: Any, plan: Plan, arrays: Arrays) -> AsyncIterator[Plan]:
    """The asyncio twin of `registered`, for tritonclient's aio clients."""
    try:
        _create(plan, arrays)
        for region in plan.regions():
            await raw.register_system_shared_memory(region.name, region.key, region.size)
            region.registered = True
        yield plan
    finally:
        for region in plan.regions():
            if region.registered:
                with contextlib.suppress(Exception):
                    await raw.unregister_system_shared_memory(region.name)
            _destroy(region)


def own_prefix(pid: int | None = None) -> str:
    """The name prefix of the regions a process creates."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}_"


def leftover_keys(pid: int | None = None) -> list[str]:
    """Regions a process (this one by default) left in /dev/shm: for checks and clean-up tools."""
    root, prefix = "/dev/shm", own_prefix(pid)
    return sorted(n for n in os.listdir(root) if n.startswith(prefix)) if os.path.isdir(root) else []


def wanted(
    flag: bool | None, default: bool | None, possible: bool, arrays: Mapping[str, Any], threshold: int
) -> bool:
    """Shared memory for this request: the call's flag, else the client's, else automatically
    when the server is on this host and the inputs reach ``threshold`` bytes."""
    if flag is not None or default is not None:
        return bool(default if flag is None else flag)
    return possible and sum(array.nbytes for array in arrays.values()) >= threshold
