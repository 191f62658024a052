"""AsyncClient against the real tritonserver, over gRPC and HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from clients import NO_RETRY, AsyncClient, InferenceTimeout, InvalidInput
from tests.clients._helpers import assert_no_regions, expected, request_count, simple_inputs

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
    async def go() -> None:
        async with AsyncClient(url, protocol, concurrency=3) as c:
            requests = [simple_inputs(b) for b in range(1, 21)]
            results = await c.infer_many("simple", requests, outputs=["OUTPUT0"])
            for inputs, out in zip(requests, results, strict=True):
                assert list(out) == ["OUTPUT0"]
                np.testing.assert_array_equal(out["OUTPUT0"], expected(inputs)["OUTPUT0"])

    run(go())


def test_metadata_config_and_timeout(url: str, protocol: str) -> None:
    async def go() -> None:
        async with AsyncClient(url, protocol, retry_policy=NO_RETRY) as c:
            assert await c.is_ready("simple")
            assert (await c.metadata("simple"))["name"] == "simple"
            assert int((await c.config("simple"))["max_batch_size"]) == 8
            with pytest.raises(InferenceTimeout):
                await c.infer("simple", simple_inputs(8), timeout=1e-4)

    run(go())
