"""Faults lose nothing: a model failing on one request, a server killed under load, a live update.

All against the reliability spec built with the real pipeline (``fixtures/reliability``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.reliability import record
from builder.errors import BuildError
from builder.server import TritonServer
from clients import NO_RETRY, Client, InvalidResponse, ServerUnavailable, TritonClientError
from tests.integration.fixtures.reliability_repo import (
    build_repo,
    copy_spec,
    reliability_repo,
    repo_digest,
    shared_cache,
)
from tests.triton_stats import batch_sizes, model_stats, rows_executed, settled

pytestmark = pytest.mark.integration

TABLE = np.arange(10, dtype=np.float32) * 1.5  # the lookup model's table (fixtures/reliability/relzoo.py)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reliability_repo(tmp_path_factory)


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[TritonServer]:
    with TritonServer(
        repo, model_control="explicit", load_models=["faulty", "lookup"], log_path=repo.parent / "faults.log"
    ) as s:
        yield s


@pytest.fixture
def client(server: TritonServer) -> Iterator[Client]:
    with Client(server.grpc_url, timeout=20, retry_policy=NO_RETRY, concurrency=8) as c:
        yield c


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at the same moment (one batch, given the model's queue delay); exceptions are
    returned, not raised."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        barrier.wait(10)
        try:
            return call()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def faulty(client: Client, value: float) -> Callable[[], Any]:
    return lambda: client.infer("faulty", {"X": np.full((1, 4), value, np.float32)})


def assert_good(result: Any, value: float, batch: int | None = None) -> None:
    assert not isinstance(result, Exception), result
    assert np.array_equal(result["Y"], np.full((1, 4), value + 1, np.float32))
    if batch is not None:
        assert int(result["BATCH"][0, 0]) == batch, "the requests did not share one execute call"


def assert_serving(server: TritonServer, client: Client) -> None:
    assert server.is_running() and server.is_ready()
    assert_good(faulty(client, 10.0)(), 10.0)


def test_a_request_that_raises_fails_alone(server: TritonServer, client: Client) -> None:
    results = together([faulty(client, v) for v in (1.0, -1.0, 5.0, 7.0)])
    error = results[1]
    assert isinstance(error, TritonClientError) and not isinstance(error, ServerUnavailable)
    assert "MarkedRequestError: request marked -1" in str(error)
    for value, result in zip((1.0, 5.0, 7.0), results[:1] + results[2:], strict=True):
        assert_good(result, value, batch=4)  # its batch mates, in the same execute call, succeed
    assert_serving(server, client)


def test_an_uncaught_exception_fails_its_batch_and_nothing_after(
    server: TritonServer, client: Client
) -> None:
    with pytest.raises(TritonClientError, match="execute raised on a request marked -3") as caught:
        faulty(client, -3.0)()
    assert not isinstance(caught.value, ServerUnavailable)
    assert_serving(server, client)
    assert [assert_good(faulty(client, float(v))(), float(v)) for v in range(3)]


def test_a_wrong_shaped_response_does_not_disturb_the_others(server: TritonServer, client: Client) -> None:
    results = together([faulty(client, v) for v in (2.0, -2.0, 3.0)])
    assert_good(results[0], 2.0, batch=3)
    assert_good(results[2], 3.0, batch=3)
    assert_serving(server, client)
    wrong = results[1]
    # tritonserver passes a Python model's outputs on unchecked; the client refuses the mismatch.
    assert isinstance(wrong, InvalidResponse), wrong
    assert "'Y' of shape [1, 3], declared [1, 4]" in str(wrong)


def test_onnx_runner_fails_only_the_bad_request_of_a_batch(server: TritonServer, client: Client) -> None:
    """The local target's runner: ONNX Runtime fails the batch, the runner retries request by request."""
    indices = [1, 99, 3, 4]
    before = rows_executed(model_stats(client.triton, "lookup"))
    results = together(
        [lambda i=i: client.infer("lookup", {"IDX": np.array([[i]], np.int64)}) for i in indices]
    )
    assert isinstance(results[1], TritonClientError)
    assert "out of data bounds" in str(results[1]) and "idx=99" in str(results[1])
    for i, result in zip(indices, results, strict=True):
        if i != 99:
            assert not isinstance(result, Exception), result
            assert result["OUT"][0, 0] == TABLE[i]
    stats = settled(client.triton, "lookup", before + len(indices))
    assert max(batch_sizes(stats), default=0) > 1, "never batched: test is void"
    later = client.infer("lookup", {"IDX": np.array([[2], [9]], np.int64)})
    assert later["OUT"].ravel().tolist() == [TABLE[2], TABLE[9]]


class Load:
    """`threads` clients sending `sleep` requests back to back, bounded in count and time."""

    def __init__(self, url: str, threads: int, limit: int, timeout: float, seconds: float) -> None:
        self.client = Client(url, timeout=timeout, retry_policy=NO_RETRY)
        self.client.model("sleep")
        self.lock = threading.Lock()
        self.events: list[tuple[float, float, str]] = []  # (start, end, "ok" / error type)
        self.in_flight = 0
        self.stop = threading.Event()
        self.limit, self.seconds = limit, seconds
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(threads)]

    def _run(self, k: int) -> None:
        end = time.monotonic() + self.seconds
        n = 0
        while not self.stop.is_set() and time.monotonic() < end and n < self.limit:
            x = np.full((1, 4), float(k * 100_000 + n), np.float32)
            n += 1
            with self.lock:
                self.in_flight += 1
            start = time.monotonic()
            try:
                y = self.client.infer("sleep", {"X": x})["Y"]
                result = "ok" if np.array_equal(x, y) else "wrong"
            except TritonClientError as exc:
                result = type(exc).__name__
                self.stop.wait(0.05)  # a client facing a dead server does not spin
            except Exception as exc:
                result = f"untyped {type(exc).__name__}"
            with self.lock:
                self.in_flight -= 1
                self.events.append((start, time.monotonic(), result))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(self.seconds + 30)
        self.client.close()

    def count(self) -> Counter[str]:
        with self.lock:
            return Counter(result for _, _, result in self.events)


def wait_for(condition: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)
    assert condition(), f"not reached within {seconds} s"


def test_killed_server_gives_typed_errors_and_restarts_on_the_same_repository(repo: Path) -> None:
    digest = repo_digest(repo)
    timeout = 5.0
    server = TritonServer(
        repo, model_control="explicit", load_models=["sleep"], log_path=repo.parent / "k.log"
    )
    server.start()
    try:
        with Load(server.grpc_url, threads=8, limit=400, timeout=timeout, seconds=60) as load:
            wait_for(lambda: load.count()["ok"] >= 20, 20)
            killed_at = time.monotonic()
            pid = server.pid
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)  # the server's own process group: it and its Python stubs
            wait_for(
                lambda: sum(1 for s, _, r in load.events if s > killed_at and r != "ok") >= 16, timeout + 5
            )
        server.stop()
        before = Counter(r for s, e, r in load.events if e <= killed_at)
        after = [(s, e, r) for s, e, r in load.events if e > killed_at]
        assert set(before) == {"ok"}, before
        assert {r for _, _, r in after} <= {"ok", "ServerUnavailable"}, Counter(r for _, _, r in after)
        failures = [e - max(s, killed_at) for s, e, r in after if r != "ok"]
        assert failures and max(failures) < timeout, "a client waited past its timeout for a dead server"

        restarted_at = time.monotonic()
        try:
            server = TritonServer(
                repo, model_control="explicit", load_models=["sleep"], http_port=server.http_port,
                grpc_port=server.grpc_port, metrics_port=server.metrics_port, log_path=repo.parent / "k2.log",
            )  # fmt: skip
            server.start()
        except BuildError:  # the old ports are not free again yet: any free ports will do
            server = TritonServer(repo, model_control="explicit", load_models=["sleep"])
            server.start()
        with Client(server.grpc_url, timeout=10, retry_policy=NO_RETRY) as client:
            x = np.ones((1, 4), np.float32)
            assert np.array_equal(client.infer("sleep", {"X": x})["Y"], x)
        recovery = time.monotonic() - restarted_at
        assert repo_digest(repo) == digest, "the restart changed the repository"
    finally:
        server.stop()
    record(
        "kill",
        {
            "ok_before_kill": before["ok"],
            "in_flight_or_sent_after_kill": len(after),
            "server_unavailable_after_kill": len(failures),
            "slowest_error_after_kill_s": round(max(failures), 3),
            "client_timeout_s": timeout,
            "recovery_s": round(recovery, 2),
        },
    )


def test_live_update_loses_no_in_flight_request(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec_dir = copy_spec(tmp_path / "spec")
    # No queue timeout in this copy: on a busy machine the new version's start can hold the old
    # one past any fixed timeout (a refusal the spec asks for, tested elsewhere); what this test
    # checks is that the reload itself drops nothing. Six clients never fill the bound of 8.
    spec = spec_dir / "models.yaml"
    text = spec.read_text()
    assert "default_timeout_us: 500000" in text
    spec.write_text(text.replace("default_timeout_us: 500000", "default_timeout_us: 0"))
    repo = build_repo(spec_dir, tmp_path / "model_repository", shared_cache(tmp_path_factory))
    with TritonServer(
        repo, model_control="explicit", load_models=["sleep"], log_path=tmp_path / "s.log"
    ) as server:
        with Load(server.grpc_url, threads=6, limit=200, timeout=20, seconds=60) as load:
            wait_for(lambda: load.count()["ok"] >= 12, 20)
            text = spec.read_text()
            assert "parameters: {sleep_ms: 100}" in text
            spec.write_text(text.replace("parameters: {sleep_ms: 100}", "parameters: {sleep_ms: 60}"))
            build_repo(spec_dir, repo, shared_cache(tmp_path_factory))  # published by an atomic swap
            with load.lock:
                in_flight = load.in_flight
                reload_at = time.monotonic()
            load.client.triton.load_model("sleep")  # reload the new version while requests run
            wait_for(lambda: sum(1 for s, _, _ in load.events if s > reload_at) >= 12, 20)
        counts = load.count()
        served = server.is_ready()
        with Client(server.grpc_url) as client:
            params = client.config("sleep")["parameters"]
    assert served
    assert params["sleep_ms"]["string_value"] == "60", "the reload did not pick up the new build"
    assert in_flight > 0, "nothing was in flight at the reload: the test proves nothing"
    assert set(counts) == {"ok"}, counts
    record(
        "live_update",
        {
            "sent": len(load.events),
            "succeeded": counts["ok"],
            "lost": len(load.events) - counts["ok"],
            "in_flight_at_reload": in_flight,
            "during_or_after_reload": sum(1 for _, e, _ in load.events if e > reload_at),
        },
    )
