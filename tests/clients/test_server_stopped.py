"""A private server stopped mid-way: typed errors within the time budget, nothing left behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.server import TritonServer, find_free_port
from clients import NO_RETRY, AsyncClient, Client, ServerUnavailable
from clients.shm import leftover_keys
from tests.clients._helpers import expected, simple_inputs

pytestmark = pytest.mark.integration


def test_server_stopped_midway(fresh_server: Callable[[], Any]) -> None:
    server = fresh_server()
    clients = [Client(server.grpc_url, "grpc", timeout=5), Client(server.http_url, "http", timeout=5)]
    for c in clients:
        assert c.infer("simple", simple_inputs(2), shm=True)["OUTPUT0"].shape == (2, 16)
    server.stop(timeout=5)  # Triton would wait 30 s for the clients' keep-alive HTTP connections
    for c in clients:
        for shm in (False, True):
            start = time.monotonic()
            with pytest.raises(ServerUnavailable):
                c.infer("simple", simple_inputs(20), shm=shm)  # split into 3 slices, each failing
            assert time.monotonic() - start < 5.5, c.protocol
        start = time.monotonic()
        with pytest.raises(ServerUnavailable):
            c.wait_until_ready(timeout=1)
        assert time.monotonic() - start < 2
        assert not c.is_ready()
        c.close()
    assert leftover_keys() == []


def test_server_stopped_midway_async(fresh_server: Callable[[], Any]) -> None:
    server = fresh_server()

    async def go() -> None:
        clients = [
            AsyncClient(server.grpc_url, "grpc", timeout=5),
            AsyncClient(server.http_url, "http", timeout=5),
        ]
        for c in clients:
            out = await c.infer("simple", simple_inputs(1), shm=True)
            np.testing.assert_array_equal(
                out["OUTPUT1"], simple_inputs(1)["INPUT0"] - simple_inputs(1)["INPUT1"]
            )
        server.stop(timeout=5)  # Triton would wait 30 s for the clients' keep-alive HTTP connections
        for c in clients:
            start = time.monotonic()
            with pytest.raises(ServerUnavailable):
                await c.infer("simple", simple_inputs(20), shm=True)
            assert time.monotonic() - start < 5.5, c.protocol
            await c.close()

    asyncio.run(go())
    assert leftover_keys() == []


def test_server_stopped_with_requests_in_flight(fresh_server: Callable[[], Any]) -> None:
    server = fresh_server()
    errors: dict[str, BaseException] = {}
    elapsed: dict[str, float] = {}
    served = {"grpc": threading.Event(), "http": threading.Event()}  # a first answer on each

    def hammer(url: str, protocol: str) -> None:
        with Client(url, protocol, timeout=5) as c:
            while True:
                start = time.monotonic()
                try:
                    c.infer("simple", simple_inputs(20), shm=True)
                except Exception as exc:
                    errors[protocol], elapsed[protocol] = exc, time.monotonic() - start
                    return
                served[protocol].set()

    threads = [
        threading.Thread(target=hammer, args=(server.grpc_url, "grpc")),
        threading.Thread(target=hammer, args=(server.http_url, "http")),
    ]
    for thread in threads:
        thread.start()
    for protocol, event in served.items():  # both clients are sending when the server stops
        assert event.wait(60), f"no answer on {protocol}: {errors.get(protocol)!r}"
    server.stop(timeout=5)
    for thread in threads:
        thread.join(30)
    assert {p: type(e) for p, e in errors.items()} == {"grpc": ServerUnavailable, "http": ServerUnavailable}
    assert max(elapsed.values()) < 5.5
    assert leftover_keys() == []


def test_a_restarted_server_seen_ready_answers_at_once(zoo_repo: Path, tmp_path: Path) -> None:
    """A server stopped and started again on the same ports: once `wait_until_ready` has seen it
    ready, the next inference (a sequence's, which is never retried, as any with NO_RETRY) reaches
    it; readiness and inference share one connection."""
    grpc, http, metrics = find_free_port(), find_free_port(), find_free_port()

    def start() -> TritonServer:
        server = TritonServer(
            zoo_repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
            model_control="explicit", load_models=["simple"], log_path=tmp_path / "server.log",
        )  # fmt: skip
        server.start()
        return server

    server = start()
    with Client(server.grpc_url, "grpc", retry_policy=NO_RETRY, shm=False) as client:
        client.infer("simple", simple_inputs(1))
        server.stop(timeout=5)
        with pytest.raises(ServerUnavailable):
            client.infer("simple", simple_inputs(1))
        server = start()
        try:
            client.wait_until_ready(timeout=30, model="simple")
            out = client.infer("simple", simple_inputs(1))
            np.testing.assert_array_equal(out["OUTPUT0"], expected(simple_inputs(1))["OUTPUT0"])
        finally:
            server.stop(timeout=5)
