"""AsyncClient against the real tritonserver, over gRPC and HTTP."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from clients import NO_RETRY, AsyncClient, InferenceTimeout, InvalidInput
from tests.clients._helpers import assert_no_regions, expected, request_count, simple_inputs, wrap_sends
from tests.clients.held import MODEL as HELD
from tests.clients.held import HeldServer, held_inputs

pytestmark = pytest.mark.integration


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_infer_split_and_shm(url: str, protocol: str, triton: Any) -> None:
    async def go() -> None:
        async with AsyncClient(url, protocol) as c:
            await c.wait_until_ready(10, model="simple")
            limit = (await c.model("simple")).max_batch_size
            inputs = simple_inputs(3 * limit + 1)
            before = request_count(triton)
            plain = await c.infer("simple", inputs, shm=False)
            assert request_count(triton, expect=before + 4) == before + 4
            shared = await c.infer("simple", inputs, shm=True)
            for name, want in expected(inputs).items():
                np.testing.assert_array_equal(plain[name], want)
                np.testing.assert_array_equal(shared[name], want)

    run(go())
    assert_no_regions(triton)


def test_rejected_before_sending(url: str, protocol: str, triton: Any) -> None:
    async def go() -> None:
        async with AsyncClient(url, protocol) as c:
            before = request_count(triton)
            bad = simple_inputs(1)
            bad["INPUT0"] = bad["INPUT0"].astype(np.int64)
            with pytest.raises(InvalidInput, match="INPUT0"):
                await c.infer("simple", bad, shm=True)
            with pytest.raises(InvalidInput, match="no input 'IN'"):
                await c.infer("simple", {"IN": bad["INPUT1"], "INPUT1": bad["INPUT1"]})
            assert request_count(triton) == before

    run(go())
    assert_no_regions(triton)


def test_infer_many_bounded_and_ordered(url: str, protocol: str) -> None:
    requests = [simple_inputs(b) for b in range(1, 21)]  # batches above 8 are split: 36 requests
    flight = {"now": 0, "peak": 0, "sent": 0}

    async def go() -> list[dict[str, np.ndarray]]:
        async with AsyncClient(url, protocol, concurrency=3) as c:

            async def counted(model: str, send: Callable[[], Any]) -> Any:  # the transport call, counted
                flight["now"] += 1
                flight["sent"] += 1
                flight["peak"] = max(flight["peak"], flight["now"])
                try:
                    return await send()
                finally:
                    flight["now"] -= 1

            wrap_sends(c, counted)
            return await c.infer_many("simple", requests, outputs=["OUTPUT0"])

    results = run(go())
    for inputs, out in zip(requests, results, strict=True):
        assert list(out) == ["OUTPUT0"]
        np.testing.assert_array_equal(out["OUTPUT0"], expected(inputs)["OUTPUT0"])
    assert flight["sent"] == sum(math.ceil(len(r["INPUT0"]) / 8) for r in requests) == 36
    assert 1 < flight["peak"] <= 3, flight


def test_metadata_and_config(url: str, protocol: str) -> None:
    async def go() -> None:
        async with AsyncClient(url, protocol, retry_policy=NO_RETRY) as c:
            assert await c.is_ready("simple")
            assert not await c.is_ready("nope")
            assert (await c.metadata("simple"))["name"] == "simple"
            assert int((await c.config("simple"))["max_batch_size"]) == 8

    run(go())


def test_timeout_fires_after_the_request_is_sent(held: HeldServer, protocol: str) -> None:
    """A request the server holds past the deadline: the request goes out and the client's wait
    for it (not the budget check before sending) raises InferenceTimeout."""
    sent: list[str] = []

    async def go() -> InferenceTimeout:
        async with AsyncClient(held.url(protocol), protocol, retry_policy=NO_RETRY) as c:
            await c.model(HELD)

            def spy(model: str, send: Callable[[], Any]) -> Any:
                sent.append(model)
                return send()

            wrap_sends(c, spy)
            with held.shut(), pytest.raises(InferenceTimeout) as info:
                # shm=False: the server may still read a region after the client gave up on it
                await c.infer(HELD, held_inputs(), timeout=0.05, shm=False)
            # the client stays usable after a timeout
            out = await c.infer(HELD, held_inputs())
            np.testing.assert_array_equal(out["Y"], held_inputs()["X"])
            return info.value

    error = run(go())
    assert sent == [HELD, HELD], "the timed-out request was not sent"
    assert "budget exhausted" not in str(error)
    # The deadline fired while the answer was awaited (an answer that came would have been
    # returned, not timed out after the fact): asyncio.wait_for's, or gRPC's own.
    cause = error.__cause__
    if protocol == "http":
        assert isinstance(cause, asyncio.TimeoutError), repr(cause)
    else:  # gRPC's own deadline and wait_for's are the same: either may fire first
        assert isinstance(cause, (asyncio.TimeoutError, InferenceServerException)), repr(cause)
        if isinstance(cause, InferenceServerException):
            assert "DEADLINE_EXCEEDED" in str(cause.status()), repr(cause)
