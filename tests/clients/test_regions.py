"""clients.regions: a plan's regions in /dev/shm, registered for one request, always removed (no server:
a recording stand-in for tritonclient's registration calls)."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
import tritonclient.utils.shared_memory as sysshm

from clients.regions import aregistered, arelease, registered, release
from clients.shm import Plan, leftover_keys, plan
from tests.clients._helpers import simple_info, simple_inputs


class Recorder:
    """Records registration calls; `fail` makes the n-th registration raise."""

    def __init__(self, fail: int | None = None, busy: int = 0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail, self.busy = fail, busy  # busy: unregistrations refused (the region is in use)

    def register_system_shared_memory(self, name: str, key: str, size: int) -> None:
        assert os.path.exists("/dev/shm" + key) and size > 0  # created before it is registered
        self.calls.append(("register", name))
        if self.fail == len(self.calls):
            raise RuntimeError("registration refused")

    def unregister_system_shared_memory(self, name: str) -> None:
        self.calls.append(("unregister", name))
        if self.busy:
            self.busy -= 1
            raise RuntimeError(f"Cannot unregister shared memory region '{name}', it is currently in use.")


class AsyncRecorder(Recorder):
    async def register_system_shared_memory(self, name: str, key: str, size: int) -> None:  # type: ignore[override]
        Recorder.register_system_shared_memory(self, name, key, size)

    async def unregister_system_shared_memory(self, name: str) -> None:  # type: ignore[override]
        Recorder.unregister_system_shared_memory(self, name)


def simple_plan(batch: int) -> tuple[Plan, dict[str, np.ndarray]]:
    arrays = simple_inputs(batch)
    return plan(simple_info(), arrays, ["OUTPUT0", "OUTPUT1"], batch, 0), arrays


def serve(p: Plan, arrays: dict[str, np.ndarray]) -> None:
    """What the server does: read the inputs from their slots, write the outputs into theirs."""
    assert p.input_region is not None and p.output_region is not None
    read = {
        s.name: sysshm.get_contents_as_numpy(p.input_region.handle, np.int32, s.nbytes // 4, s.offset)
        for s in p.inputs
    }
    for name, array in arrays.items():
        np.testing.assert_array_equal(read[name], array.ravel())
    results = {"OUTPUT0": arrays["INPUT0"] + arrays["INPUT1"], "OUTPUT1": arrays["INPUT0"] - arrays["INPUT1"]}
    for slot in p.outputs:
        sysshm.set_shared_memory_region(p.output_region.handle, [results[slot.name]], offset=slot.offset)


def test_registered_for_the_block_then_removed() -> None:
    p, arrays = simple_plan(3)
    raw = Recorder()
    with registered(raw, p, arrays, set()) as shared:
        assert len(leftover_keys()) == 2
        serve(p, arrays)
        out = shared.outputs()
    np.testing.assert_array_equal(out["OUTPUT0"], arrays["INPUT0"] + arrays["INPUT1"])
    np.testing.assert_array_equal(out["OUTPUT1"], arrays["INPUT0"] - arrays["INPUT1"])
    names = [r.name for r in p.regions()]
    assert raw.calls == [("register", n) for n in names] + [("unregister", n) for n in names]
    assert leftover_keys() == [] and all(r.handle is None and not r.registered for r in p.regions())


def test_removed_when_the_request_fails() -> None:
    p, arrays = simple_plan(2)
    raw = Recorder()
    with pytest.raises(ValueError, match="request failed"), registered(raw, p, arrays, set()):
        raise ValueError("request failed")
    assert [c[0] for c in raw.calls] == ["register", "register", "unregister", "unregister"]
    assert leftover_keys() == []


def test_removed_when_registration_fails_midway() -> None:
    p, arrays = simple_plan(2)
    raw = Recorder(fail=2)
    with pytest.raises(RuntimeError, match="registration refused"), registered(raw, p, arrays, set()):
        pytest.fail("the block must not run")
    first = p.regions()[0].name
    assert raw.calls == [("register", first), ("register", p.regions()[1].name), ("unregister", first)]
    assert leftover_keys() == []


def test_no_plan_no_regions() -> None:
    raw = Recorder()
    with registered(raw, None, simple_inputs(1), set()) as shared:
        assert shared.outputs() == {}
    assert raw.calls == []


def test_regions_still_in_use_are_unregistered_at_the_next_request() -> None:
    p, arrays = simple_plan(2)
    raw, pending = Recorder(busy=2), set[str]()
    with registered(raw, p, arrays, pending):
        pass
    names = {r.name for r in p.regions()}
    assert pending == names and leftover_keys() == []  # unlinked here; the server still holds them
    with registered(raw, None, simple_inputs(1), pending):
        pass
    assert pending == set() and sorted(raw.calls[-2:]) == sorted(("unregister", n) for n in names)


def test_async_registered_for_the_block_then_removed() -> None:
    p, arrays = simple_plan(4)
    raw = AsyncRecorder()

    async def go() -> dict[str, np.ndarray]:
        with pytest.raises(KeyError):
            async with aregistered(raw, p, arrays, set()):
                raise KeyError("x")
        assert leftover_keys() == []
        again, _ = simple_plan(4)
        async with aregistered(raw, again, arrays, set()) as shared:
            serve(again, arrays)
            return shared.outputs()

    out = asyncio.run(go())
    np.testing.assert_array_equal(out["OUTPUT1"], arrays["INPUT0"] - arrays["INPUT1"])
    assert [c[0] for c in raw.calls] == ["register", "register", "unregister", "unregister"] * 2
    assert leftover_keys() == []


def test_closing_asks_again_until_the_server_lets_go() -> None:
    raw, pending = Recorder(busy=3), {"a"}
    release(raw, pending)  # a request's release asks once
    assert pending == {"a"}
    release(raw, pending, wait_s=5.0)  # a client's close asks until the server lets go
    assert pending == set() and raw.calls == [("unregister", "a")] * 4


def test_closing_gives_up_at_its_deadline() -> None:
    raw, pending = AsyncRecorder(busy=10**6), {"a"}
    asyncio.run(arelease(raw, pending, wait_s=0.05))
    assert pending == {"a"} and len(raw.calls) > 1
