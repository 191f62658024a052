"""The default repository's bounded queue on the real server: resnet18 as `make engines` builds it,
overloaded by 3000 gRPC requests from 200 closed-loop clients (bench/queue_bound.py), refuses what
does not fit with Triton's own error, loses nothing, and keeps accepted p99 within the queue
timeout models.yaml states. Its cost at concurrency 1 is a benchmark (`make bench`), not a test."""

from __future__ import annotations

import pytest

from bench.queue_bound import MODEL, overload, queue_timeout_s
from bench.reliability import record
from builder.server import TritonServer
from clients import Client

pytestmark = pytest.mark.integration


def test_resnet18_is_served_with_the_runner_bound(triton: TritonServer) -> None:
    with Client(triton.grpc_url) as client:
        config = client.config(MODEL)
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    assert int(params["max_queue_size"]) > 0 and int(params["queue_timeout_us"]) > 0, params
    assert "default_queue_policy" not in config["dynamic_batching"], "2.51 stalls with a queue policy"


def test_overload_is_refused_explicitly_and_nothing_is_lost(triton: TritonServer) -> None:
    timeout_ms = queue_timeout_s() * 1000
    report = overload(triton.grpc_url, requests=3000, concurrency=200)
    record("queue_bound_overload", report.to_json())
    assert report.lost == 0 and report.errors == {}, report
    assert report.succeeded + report.rejected == report.sent == 3000
    assert report.rejected > 0 and report.succeeded > 0, report
    assert set(report.rejected_by) <= {"queue full", "queue timeout"}, report.rejected_by
    assert report.latency_ms["all"]["p99"] <= timeout_ms, report.latency_ms
    with Client(triton.grpc_url) as client:  # still serving afterwards
        assert client.is_ready(MODEL)
