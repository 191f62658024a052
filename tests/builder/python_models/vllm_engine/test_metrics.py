"""The vllm_engine model's metrics: those of Triton's vLLM backend (names, buckets, labels), fed
from vLLM's per-step stats by a thread that survives a failing update and never queues without
bound. Test doubles stand for pb_utils' metric families."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils import metrics as metrics_module
from builder.python_models.vllm_engine.utils.metrics import METRICS
from tests.builder.python_models.vllm_engine.doubles import WAIT, FakePbUtils, use_fake_pb_utils

# Triton's vLLM backend (src/utils/metrics.py), as its users' dashboards read them.
BACKEND_BUCKETS = {
    "vllm:time_to_first_token_seconds": [
        *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
    ],
    "vllm:time_per_output_token_seconds": [
        *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
    ],
    "vllm:e2e_request_latency_seconds": [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0],
    "vllm:request_params_n": [1, 2, 5, 10, 20],
    "vllm:request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500],  # 1-2-5 up to max_model_len
    "vllm:request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500],
}
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc")


class FakeMetric:
    def __init__(self, labels: dict[str, str], buckets: list[float] | None) -> None:
        self.labels, self.buckets = labels, buckets
        self.values: list[tuple[str, float]] = []
        self.applied = threading.Event()

    def _do(self, op: str, value: float) -> None:
        self.values.append((op, value))
        self.applied.set()

    def increment(self, value: float) -> None:
        self._do("increment", value)

    def observe(self, value: float) -> None:
        self._do("observe", value)

    def set(self, value: float) -> None:
        self._do("set", value)


class FakeFamily:
    def __init__(self, name: str) -> None:
        self.name = name
        self.metrics: list[FakeMetric] = []

    def Metric(self, labels: dict[str, str], buckets: list[float] | None = None) -> FakeMetric:
        metric = FakeMetric(labels, buckets)
        self.metrics.append(metric)
        return metric


@pytest.fixture
def families(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, FakeFamily]]:
    use_fake_pb_utils(monkeypatch)
    FakePbUtils.reset()
    yield {spec.name: FakeFamily(spec.name) for spec in METRICS}
    FakePbUtils.reset()


def step(ttfts: list[float], itls: list[float], finished: int = 0) -> tuple[Any, Any]:
    scheduler = SimpleNamespace(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25)
    done = SimpleNamespace(
        e2e_latency=1.5, queued_time=0.1, inference_time=1.4, prefill_time=0.2, decode_time=1.2,
        num_prompt_tokens=6, num_generation_tokens=16, max_tokens_param=16,
    )  # fmt: skip
    iteration = SimpleNamespace(
        num_prompt_tokens=6, num_generation_tokens=3, num_preempted_reqs=0, n_params_iter=[1] * finished,
        time_to_first_tokens_iter=ttfts, inter_token_latencies_iter=itls, finished_requests=[done] * finished,
    )  # fmt: skip
    return scheduler, iteration


def only(family: FakeFamily) -> FakeMetric:
    assert len(family.metrics) == 1, family.name
    return family.metrics[0]


def test_the_backends_metrics_with_its_buckets_and_labels(families: dict[str, FakeFamily]) -> None:
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    metrics.record(*step([0.03], [0.02, 0.02], finished=1))
    metrics.close()
    for name, buckets in BACKEND_BUCKETS.items():
        assert only(families[name]).buckets == buckets, name
    for family in families.values():
        assert only(family).labels == {"model": "smollm2", "version": "1"}
    assert only(families["vllm:prompt_tokens_total"]).values == [("increment", 6)]
    assert only(families["vllm:generation_tokens_total"]).values == [("increment", 3)]
    assert only(families["vllm:time_per_output_token_seconds"]).values == [("observe", 0.02)] * 2
    assert only(families["vllm:e2e_request_latency_seconds"]).values == [("observe", 1.5)]
    assert only(families["vllm:request_params_max_tokens"]).values == [("observe", 16)]
    assert only(families["vllm:request_params_n"]).values == [("observe", 1)]
    assert [only(families[g]).values for g in GAUGES] == [[("set", 2)], [("set", 1)], [("set", 0.25)]]


def test_a_steps_counts_are_applied_before_its_gauges(
    families: dict[str, FakeFamily], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever reads the engine's gauges (running 0, say) finds the step's finished requests
    already counted: the tests' baselines and the dashboards' ratios rely on it."""
    applied: list[tuple[FakeMetric, str]] = []
    do = FakeMetric._do

    def logged(self: FakeMetric, op: str, value: float) -> None:
        applied.append((self, op))
        do(self, op, value)

    monkeypatch.setattr(FakeMetric, "_do", logged)
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    metrics.record(*step([0.03], [0.02], finished=1))
    metrics.close()
    ops = [op for _, op in applied]
    assert "set" in ops and "increment" in ops and "observe" in ops, ops
    first_gauge = ops.index("set")
    assert all(op == "set" for op in ops[first_gauge:]), ops


def test_a_failing_update_is_logged_once_and_the_thread_goes_on(families: dict[str, FakeFamily]) -> None:
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    ttft = only(families["vllm:time_to_first_token_seconds"])
    calls = []

    def flaky(value: float) -> None:
        calls.append(value)
        if len(calls) <= 2:
            raise RuntimeError("metrics not reachable")
        FakeMetric.observe(ttft, value)

    ttft.observe = flaky  # type: ignore[method-assign]
    for value in (0.1, 0.2, 0.3):
        metrics.record(*step([value], []))
    assert ttft.applied.wait(WAIT)
    metrics.close()
    assert ttft.values == [("observe", 0.3)]
    errors = [text for level, text in FakePbUtils.logged if level == "error"]
    assert len(errors) == 1 and "metrics not reachable" in errors[0]
    assert ("warn", "vllm_engine: 2 metrics updates failed, 0 dropped") in FakePbUtils.logged


def test_updates_beyond_the_bound_are_dropped_not_queued(
    families: dict[str, FakeFamily], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_module, "MAX_PENDING_UPDATES", 2)
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    running = only(families["vllm:num_requests_running"])
    entered, release = threading.Event(), threading.Event()

    def stuck(value: float) -> None:
        entered.set()
        release.wait(WAIT)

    running.set = stuck  # type: ignore[method-assign]
    metrics.record(*step([], []))
    assert entered.wait(WAIT)  # the thread holds the first update
    for _ in range(3):
        metrics.record(*step([], []))
    assert metrics.dropped == 1 and metrics.updates.qsize() == 2
    release.set()
    metrics.close()
    assert any("dropping updates" in text for level, text in FakePbUtils.logged if level == "error")


def test_the_steps_of_a_period_are_applied_together(
    families: dict[str, FakeFamily], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One wake-up for the steps that came within METRICS_PERIOD: one increment per counter (their
    sum), every histogram value, each gauge set once to the last step's value; close() applies
    what is left without waiting out the period."""
    monkeypatch.setattr(metrics_module, "METRICS_PERIOD", 3600.0)
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    for itls in ([0.02], [0.03], [0.04]):
        metrics.record(*step([], itls))
    metrics.close()
    assert only(families["vllm:generation_tokens_total"]).values == [("increment", 9)]
    assert only(families["vllm:prompt_tokens_total"]).values == [("increment", 18)]
    tpot = only(families["vllm:time_per_output_token_seconds"]).values
    assert tpot == [("observe", 0.02), ("observe", 0.03), ("observe", 0.04)]
    assert [only(families[g]).values for g in GAUGES] == [[("set", 2)], [("set", 1)], [("set", 0.25)]]


def test_a_step_that_finishes_a_request_is_applied_without_waiting_out_the_period(
    families: dict[str, FakeFamily], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader who has a request's final response finds its counts (the steps before it with
    them), not a METRICS_PERIOD later."""
    monkeypatch.setattr(metrics_module, "METRICS_PERIOD", 3600.0)
    metrics = m.Metrics(families, {"model": "smollm2", "version": "1"})  # type: ignore[arg-type]
    metrics.start(max_model_len=512)
    generated = only(families["vllm:generation_tokens_total"])
    metrics.record(*step([0.03], [0.02]))
    metrics.record(*step([], [0.02], finished=1))
    assert generated.applied.wait(WAIT)  # counters after the histograms
    assert generated.values == [("increment", 6)]
    assert only(families["vllm:e2e_request_latency_seconds"]).values == [("observe", 1.5)]
    metrics.close()
