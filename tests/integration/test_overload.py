"""Overload is refused cleanly: every request ends in a correct result or Triton's explicit rejection.

The load runs against the ``sleep`` model of the reliability spec (known capacity: 2 instances x 4
requests per 100 ms = 80 requests/s) from 30+ concurrent clients offering about three times that.
Figures go to ``bench/results/reliability.json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.reliability import overload, priorities, record
from builder.configs import read_config
from builder.server import TritonServer
from builder.spec import Batching, ModelSpec, load_spec
from builder.targets import get
from clients import NO_RETRY, Client
from tests.integration.fixtures.reliability_repo import SPEC_DIR, reliability_repo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CLIENT_TIMEOUT = 10.0  # each request's deadline in the load (bench.reliability.run_load's default)
P99_BOUND_MS = 2000.0  # queue timeout 500 ms + one 100 ms batch, with room for a loaded 2-core machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = reliability_repo(tmp_path_factory)
    with TritonServer(repo, log_path=repo.parent / "server.log") as s:
        yield s


def queue_fields(batching: Batching) -> dict[str, object]:
    return {
        "priority_levels": batching.priority_levels,
        "default_priority_level": batching.default_priority_level,
        "default": (batching.queue.max_queue_size, batching.queue.default_timeout_us),
        "levels": {k: (v.max_queue_size, v.default_timeout_us) for k, v in batching.priority_queues.items()},
    }


def config_fields(db: object) -> dict[str, object]:
    policy = db.default_queue_policy  # type: ignore[attr-defined]
    return {
        "priority_levels": db.priority_levels,  # type: ignore[attr-defined]
        "default_priority_level": db.default_priority_level,  # type: ignore[attr-defined]
        "default": (policy.max_queue_size, policy.default_timeout_microseconds),
        "levels": {
            k: (v.max_queue_size, v.default_timeout_microseconds)
            for k, v in db.priority_queue_policy.items()  # type: ignore[attr-defined]
        },
    }


def test_zoo_queue_policies_are_written_and_bounded(zoo_repo: Path) -> None:
    """Every batching model of the default zoo carries the spec's bounded queue policy on the
    container targets; the local target omits it unless asked (targets.local.queue_policy)."""
    spec = load_spec(ROOT / "models.yaml")
    checked = []
    for model in [*spec.models, *spec.python_models]:
        if not model.batching.enabled or model.max_batch_size <= 0:
            continue
        container = (
            get("cpu").core_config(model, model.name, model.precisions[0])
            if isinstance(model, ModelSpec)
            else get("cpu").python_model(model).config
        )
        assert container.HasField("dynamic_batching"), model.name
        assert config_fields(container.dynamic_batching) == queue_fields(model.batching), model.name
        assert container.dynamic_batching.default_queue_policy.max_queue_size > 0, (
            f"{model.name}: unbounded queue (set batching.queue.max_queue_size in models.yaml)"
        )
        local = read_config(zoo_repo / model.name / "config.pbtxt")
        assert local.HasField("dynamic_batching"), model.name
        asked = model.target_options("local").get("queue_policy", False)
        assert local.dynamic_batching.HasField("default_queue_policy") == asked
        checked.append(model.name)
    assert checked


def test_priority_policy_reaches_the_server(server: TritonServer) -> None:
    """The test spec's priority levels and per-level queues are what the running server enforces."""
    spec = load_spec(SPEC_DIR / "models.yaml")
    sleep = next(m for m in spec.python_models if m.name == "sleep")
    with Client(server.grpc_url) as client:
        served = client.config("sleep")["dynamic_batching"]
    assert int(served["priority_levels"]) == sleep.batching.priority_levels == 2
    assert int(served["default_priority_level"]) == sleep.batching.default_priority_level
    assert int(served["default_queue_policy"]["max_queue_size"]) == sleep.batching.queue.max_queue_size
    assert int(served["priority_queue_policy"]["1"]["max_queue_size"]) == 8


def assert_serving(server: TritonServer) -> None:
    assert server.is_running() and server.is_ready()
    with Client(server.grpc_url, retry_policy=NO_RETRY, timeout=10) as client:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        assert np.array_equal(client.infer("sleep", {"X": x})["Y"], x)


def test_overload_ends_every_request_in_a_result_or_a_rejection(server: TritonServer) -> None:
    report = overload(server.grpc_url, server.http_url)
    record("overload", report.to_json())
    assert report.lost == 0, report
    assert report.errors == {}, report
    assert report.succeeded + report.rejected == report.sent == 600
    assert report.succeeded > 0 and report.rejected > report.sent // 4, "the load must exceed capacity"
    assert report.max_seconds < CLIENT_TIMEOUT + 2, "a request outlived its deadline"
    assert report.latency_ms["all"]["p99"] < P99_BOUND_MS, report.latency_ms
    assert report.health_failures == 0, "the server stopped answering live/ready under overload"
    assert_serving(server)


def test_high_priority_keeps_its_latency_under_overload(server: TritonServer) -> None:
    report = priorities(server.grpc_url, server.http_url)
    record("priority", report.to_json())
    assert report.lost == 0 and report.errors == {}, report
    high, low = report.latency_ms["high"], report.latency_ms["low"]
    assert high["count"] > 0 and low["count"] > 0, report.latency_ms
    assert high["p50"] < low["p50"] and high["p99"] < low["p99"], report.latency_ms
    assert high["p99"] < P99_BOUND_MS, report.latency_ms
    assert report.health_failures == 0
    assert_serving(server)
