"""clients.settings: the one settings record of both clients (no server)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from clients import NO_RETRY, AsyncClient, Client, RetryPolicy
from clients.settings import SHM_THRESHOLD, Settings


def test_defaults_from_the_url() -> None:
    s = Settings.from_url("http://127.0.0.1:8000", None, {}, concurrency=4)
    assert (s.address, s.protocol, s.timeout, s.shm, s.shm_threshold) == (
        "127.0.0.1:8000",
        "http",
        None,
        None,
        SHM_THRESHOLD,
    )
    assert s.retry_policy == RetryPolicy() and s.concurrency == 4 and s.shm_possible


def test_options_override_and_none_retry_policy_means_the_default() -> None:
    s = Settings.from_url("10.1.2.3:8001", None, {"timeout": 2.5, "retry_policy": None, "concurrency": 2}, 8)
    assert (s.timeout, s.retry_policy, s.concurrency, s.shm_possible) == (2.5, RetryPolicy(), 2, False)
    assert Settings.from_url("h:1", None, {"retry_policy": NO_RETRY}, 8).retry_policy is NO_RETRY


def test_bad_options_are_refused() -> None:
    with pytest.raises(
        TypeError, match=r"unknown client option\(s\) timout \(options: concurrency, retry_policy"
    ):
        Settings.from_url("h:1", None, {"timout": 1}, 4)  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="concurrency must be at least 1, got 0"):
        Settings.from_url("h:1", None, {"concurrency": 0}, 4)


def test_both_clients_share_the_record_with_their_own_concurrency() -> None:
    with Client("127.0.0.1:1", timeout=3) as sync:
        assert sync.settings == Settings("127.0.0.1:1", "grpc", timeout=3, concurrency=4)

    async def make() -> Settings:
        async with AsyncClient("127.0.0.1:1", "http", shm=False) as aio:
            return aio.settings

    assert asyncio.run(make()) == Settings("127.0.0.1:1", "http", shm=False, concurrency=8)


def test_use_shm_call_flag_then_client_flag_then_size_on_this_host() -> None:
    big, small = {"x": np.zeros(1024, np.uint8)}, {"x": np.zeros(10, np.uint8)}
    local = Settings("127.0.0.1:1", "grpc", shm_threshold=1024)
    assert local.use_shm(None, big) and not local.use_shm(None, small)
    assert local.use_shm(True, small) and not local.use_shm(False, big)
    remote = Settings("10.0.0.1:1", "grpc", shm_threshold=1024)
    assert not remote.use_shm(None, big) and remote.use_shm(True, small)
    forced = Settings("10.0.0.1:1", "grpc", shm=True)
    assert forced.use_shm(None, small) and not forced.use_shm(False, small)


def test_deadline_is_the_call_timeout_else_the_client_timeout() -> None:
    s = Settings("h:1", "grpc", timeout=10.0)
    left = s.deadline(0.5).remaining()
    assert left is not None and 0.4 < left <= 0.5
    left = s.deadline().remaining()
    assert left is not None and 9.9 < left <= 10.0
    assert Settings("h:1", "grpc").deadline().remaining() is None
