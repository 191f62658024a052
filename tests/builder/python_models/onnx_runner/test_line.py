"""The onnx_runner model's own bounded line (what the local target serves instead of Triton's queue
policy), driven without a server: its admission, deadlines and batch forming."""

from __future__ import annotations

import importlib
from typing import Any

import pytest


@pytest.fixture(scope="module")
def runner() -> Any:
    """The line's module: it needs nothing of the backend."""
    return importlib.import_module("builder.python_models.onnx_runner.utils.line")


class Tensor:
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def shape(self) -> list[int]:
        return [self.rows, 4]


class Request:
    def __init__(self, rows: int = 1, timeout_us: int = 0) -> None:
        self.rows, self.timeout_us = rows, timeout_us

    def timeout(self) -> int:
        return self.timeout_us

    def inputs(self) -> list[Tensor]:
        return [Tensor(self.rows)]


def line(runner: Any, max_queue_size: int = 0, timeout_us: int = 0, instances: int = 1) -> Any:
    params = {"max_queue_size": str(max_queue_size), "queue_timeout_us": str(timeout_us)}
    return runner.BoundedLine.from_params(params, instances)


def test_no_bound_means_no_line(runner: Any) -> None:
    assert line(runner) is None


def test_the_bound_is_shared_among_instances(runner: Any) -> None:
    assert line(runner, max_queue_size=128, instances=2).limit == 64
    assert line(runner, max_queue_size=5, instances=2).limit == 3


def test_beyond_the_bound_is_refused_with_tritons_message(runner: Any) -> None:
    bounded = line(runner, max_queue_size=2)
    refused = bounded.offer([Request(), Request(), Request()])
    assert len(refused) == 1 and refused[0][1].startswith("Exceeds maximum queue size")
    assert len(bounded.take(8)) == 2


def test_requests_handed_over_together_are_one_batch(runner: Any) -> None:
    """Triton's warm-up hands a batch over as several requests: they stay together."""
    bounded = line(runner, max_queue_size=64, timeout_us=5_000_000)
    assert bounded.offer([Request() for _ in range(8)]) == []
    batch = bounded.take(8)
    assert len(batch) == 8 and not any(late for _, late in batch)


def test_a_batch_holds_at_most_max_rows(runner: Any) -> None:
    bounded = line(runner, max_queue_size=64)
    bounded.offer([Request(rows=3) for _ in range(4)])
    assert [len(bounded.take(8)), len(bounded.take(8))] == [2, 2]


def test_what_the_pace_cannot_answer_in_time_is_refused_at_arrival(runner: Any) -> None:
    bounded = line(runner, max_queue_size=64, timeout_us=1_000_000)  # plans with half: 0.5 s
    bounded.ns_per_row = 0.1e9  # 100 ms a row, as measured
    refused = bounded.offer([Request() for _ in range(8)])
    assert len(refused) == 3, "rows 6..8 would end after 0.5 s"
    assert all(message.startswith("Request timeout expired") for _, message in refused)


def test_a_lone_request_is_never_refused_for_the_pace(runner: Any) -> None:
    bounded = line(runner, max_queue_size=64, timeout_us=1_000)
    bounded.ns_per_row = 10e9
    assert bounded.offer([Request()]) == []


class Clock:
    """The runner module's clock, moved on only by the test: a deadline passes exactly when the
    test says, whatever the machine's speed or load."""

    def __init__(self) -> None:
        self.ns = 10**12

    def monotonic_ns(self) -> int:
        return self.ns


@pytest.fixture
def clock(runner: Any, monkeypatch: pytest.MonkeyPatch) -> Clock:
    stepped = Clock()
    monkeypatch.setattr(runner, "time", stepped)
    return stepped


def test_a_request_past_its_deadline_is_late(runner: Any, clock: Clock) -> None:
    bounded = line(runner, max_queue_size=64, timeout_us=2_000)  # plans with 1 ms
    bounded.offer([Request(), Request()])
    clock.ns += 1_000_000  # at the planned deadline: not late yet
    assert bounded.take(1)[0][1] is False
    clock.ns += 1  # past it
    assert bounded.take(8)[0][1] is True


def test_a_smaller_client_timeout_overrides(runner: Any, clock: Clock) -> None:
    bounded = line(runner, max_queue_size=64, timeout_us=10_000_000)
    bounded.offer([Request(timeout_us=2_000)])
    clock.ns += 1_000_001  # past half the client's 2 ms, far inside the model's 10 s
    assert bounded.take(8)[0][1] is True


def test_the_pace_is_learned_after_the_cold_first_batch(runner: Any) -> None:
    bounded = line(runner, max_queue_size=64, timeout_us=1_000_000)
    bounded.offer([Request(rows=4)])
    bounded.take(8)
    bounded.done(4, 10.0)  # cold start: ignored
    assert bounded.ns_per_row == 0 and bounded.rows_ahead == 0
    bounded.offer([Request(rows=4)])
    bounded.take(8)
    bounded.done(4, 0.4)
    assert bounded.ns_per_row == pytest.approx(0.1e9)


def test_a_closed_line_refuses_and_ends(runner: Any) -> None:
    bounded = line(runner, max_queue_size=4)
    bounded.close()
    assert bounded.offer([Request()])[0][1].startswith("Server is stopping")
    assert bounded.take(8) is None
