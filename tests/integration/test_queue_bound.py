"""The default repository's bounded queue on the real server: resnet18 as `make engines` builds it,
overloaded by 3000 gRPC requests from 200 closed-loop clients (bench/queue_bound.py), refuses what
does not fit with Triton's own error and loses nothing; requests asking for some of a model's
outputs are answered through the bounded line too. The accepted requests' p99 against the queue
timeout models.yaml states, and the bound's cost at concurrency 1, are measured times: benchmarks
(`make bench`, bench/queue_bound.py), not tests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bench.queue_bound import MODEL, overload
from bench.reliability import record
from builder.server import TritonServer
from clients import NO_RETRY, Client

pytestmark = pytest.mark.integration


def test_resnet18_is_served_with_the_runner_bound(triton: TritonServer) -> None:
    with Client(triton.grpc_url) as client:
        config = client.config(MODEL)
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    assert int(params["max_queue_size"]) > 0 and int(params["queue_timeout_us"]) > 0, params
    assert "default_queue_policy" not in config["dynamic_batching"], "2.51 stalls with a queue policy"


def test_overload_is_refused_explicitly_and_nothing_is_lost(triton: TritonServer) -> None:
    report = overload(triton.grpc_url, requests=3000, concurrency=200)
    record("queue_bound_overload", report.to_json())
    assert report.lost == 0 and report.errors == {}, report
    assert report.succeeded + report.rejected == report.sent == 3000
    assert report.rejected > 0 and report.succeeded > 0, report
    assert set(report.rejected_by) <= {"queue full", "queue timeout"}, report.rejected_by
    with Client(triton.grpc_url) as client:  # still serving afterwards
        assert client.is_ready(MODEL)


def test_requests_for_some_of_the_outputs_are_answered_through_the_bound(triton: TritonServer) -> None:
    """`simple` has two outputs. The 2.51 stub's response sender drops the outputs a request did
    not ask for after releasing the GIL; when the runner's worker sent them, the last reference to
    an ONNX Runtime output went there and the stub segfaulted on the first such request. The worker
    sends only the requested outputs."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    with Client(triton.grpc_url, retry_policy=NO_RETRY, timeout=30) as client:
        params = {k: v["string_value"] for k, v in client.config("simple")["parameters"].items()}
        assert int(params["max_queue_size"]) > 0, "simple must be served with the runner's bound"

        def one(i: int) -> tuple[str, dict[str, np.ndarray]]:
            name = ("OUTPUT0", "OUTPUT1")[i % 2]
            return name, dict(client.infer("simple", {"INPUT0": a, "INPUT1": b}, [name]))

        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(one, range(2000)))
        for name, out in answers:
            assert list(out) == [name]
            np.testing.assert_array_equal(out[name], expected[name])
        both = client.infer("simple", {"INPUT0": a, "INPUT1": b})
        assert sorted(both) == ["OUTPUT0", "OUTPUT1"]
        assert triton.is_running() and client.is_ready("simple")
