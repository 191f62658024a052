"""The system shared-memory regions of a plan (`shm.Plan`): created and filled, registered with the
server for one request only, then always unregistered and unlinked, also on errors.

The server refuses to unregister a region that a request still uses (one the client stopped waiting
for): such names go into the transport's `pending` set and are unregistered at its next request
or when it closes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import tritonclient.utils.shared_memory as sysshm

from .errors import SharedMemoryError
from .model import Arrays
from .shm import Plan, Region


class Shared:
    """What a request's transport reads back: the outputs written to the plan's output region."""

    def __init__(self, plan: Plan | None) -> None:
        self.plan = plan

    def outputs(self) -> Arrays:
        """Copies of the outputs in the output region (copies: the region is unlinked next)."""
        plan = self.plan
        if plan is None or plan.output_region is None:
            return {}
        handle = plan.output_region.handle
        return {
            s.name: sysshm.get_contents_as_numpy(handle, s.dtype, s.shape, s.offset).copy()
            for s in plan.outputs
        }


def _create(plan: Plan, arrays: Arrays) -> list[Region]:
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
    return plan.regions()


def _released(plan: Plan) -> Iterator[Region]:
    """The plan's registered regions, for the caller to unregister; each is destroyed after."""
    for region in plan.regions():
        if region.registered:
            yield region
            region.registered = False
        if region.handle is not None:
            with contextlib.suppress(Exception):
                sysshm.destroy_shared_memory_region(region.handle)
            region.handle = None


CLOSE_WAIT_S = 2.0  # how long closing a client waits for the server to let go of its last regions
POLL_S = 0.01


def release(raw: Any, pending: set[str], wait_s: float = 0.0) -> None:
    """Unregister the pending regions the server lets go of (sync tritonclient client), asking again
    for up to `wait_s`: the server releases a request's regions just after its response is sent."""
    deadline = time.monotonic() + wait_s
    while True:
        for name in list(pending):
            with contextlib.suppress(Exception):
                raw.unregister_system_shared_memory(name)
                pending.discard(name)
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(POLL_S)


async def arelease(raw: Any, pending: set[str], wait_s: float = 0.0) -> None:
    """`release` for tritonclient's asyncio clients."""
    deadline = time.monotonic() + wait_s
    while True:
        for name in list(pending):
            with contextlib.suppress(Exception):
                await raw.unregister_system_shared_memory(name)
                pending.discard(name)
        if not pending or time.monotonic() >= deadline:
            return
        await asyncio.sleep(POLL_S)


NOTHING = contextlib.nullcontext(Shared(None))  # no plan, nothing pending: the common path, kept short


def registered(
    raw: Any, plan: Plan | None, arrays: Arrays, pending: set[str]
) -> contextlib.AbstractContextManager[Shared]:
    """The plan's regions created, filled and registered with a sync tritonclient client while the
    block runs (nothing to do without a plan)."""
    return NOTHING if plan is None and not pending else _registered(raw, plan, arrays, pending)


def aregistered(
    raw: Any, plan: Plan | None, arrays: Arrays, pending: set[str]
) -> contextlib.AbstractAsyncContextManager[Shared]:
    """`registered` for tritonclient's asyncio clients."""
    return NOTHING if plan is None and not pending else _aregistered(raw, plan, arrays, pending)


@contextlib.contextmanager
def _registered(raw: Any, plan: Plan | None, arrays: Arrays, pending: set[str]) -> Iterator[Shared]:
    if pending:
        release(raw, pending)
    if plan is None:
        yield Shared(None)
        return
    try:
        for region in _create(plan, arrays):
            raw.register_system_shared_memory(region.name, region.key, region.size)
            region.registered = True
        yield Shared(plan)
    finally:
        for region in _released(plan):
            try:
                raw.unregister_system_shared_memory(region.name)
            except Exception:
                pending.add(region.name)


@contextlib.asynccontextmanager
async def _aregistered(
    raw: Any, plan: Plan | None, arrays: Arrays, pending: set[str]
) -> AsyncIterator[Shared]:
    if pending:
        await arelease(raw, pending)
    if plan is None:
        yield Shared(None)
        return
    try:
        for region in _create(plan, arrays):
            await raw.register_system_shared_memory(region.name, region.key, region.size)
            region.registered = True
        yield Shared(plan)
    finally:
        for region in _released(plan):
            try:
                await raw.unregister_system_shared_memory(region.name)
            except Exception:
                pending.add(region.name)
