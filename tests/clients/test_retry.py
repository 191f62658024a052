"""Retry policy and error translation (no server needed: real tritonclient exception objects)."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.utils import InferenceServerException

from clients import InvalidInput, ModelNotFound, ModelNotReady, RequestRejected, ServerUnavailable, retry
from clients.errors import InferenceTimeout, translate
from clients.retry import Deadline, RetryPolicy, acall, call


def failing(error: Exception, calls: list[float]):  # type: ignore[no-untyped-def]
    def fn(timeout: float | None) -> None:
        calls.append(retry.time.monotonic())  # the retry module's clock
        raise error

    return fn


def test_invalid_input_is_never_retried() -> None:
    calls: list[float] = []
    error = InferenceServerException("unexpected inference input 'X'", status="StatusCode.INVALID_ARGUMENT")
    with pytest.raises(InvalidInput) as info:
        call(failing(error, calls), RetryPolicy(attempts=5), Deadline(5))
    assert len(calls) == 1 and info.value.__cause__ is error


def test_retryable_errors_back_off_then_give_up() -> None:
    calls: list[float] = []
    error = InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE")
    with pytest.raises(ServerUnavailable):
        call(failing(error, calls), RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05), Deadline(5))
    assert len(calls) == 4


class Clock:
    """The retry module's clock: sleeping moves it on at once, so the bound is checked exactly,
    whatever the machine's speed or load."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_total_time_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(retry, "time", clock)
    calls: list[float] = []
    with pytest.raises(RequestRejected):
        call(
            failing(InferenceServerException("Exceeds maximum queue size", status="503"), calls),
            RetryPolicy(attempts=1000, base_delay=0.05, max_delay=0.1),
            Deadline(0.5),
        )
    assert clock.now < 0.5 and len(calls) > 2, (clock.now, len(calls))
    assert calls[-1] < 0.5  # no try was made past the deadline


def test_async_retry_succeeds_after_transient_error() -> None:
    calls: list[int] = []

    async def flaky(timeout: float | None) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError(111, "Connection refused")
        return "ok"

    assert asyncio.run(acall(flaky, RetryPolicy(base_delay=0.01), Deadline(5))) == "ok"
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("message", "status", "kind"),
    [
        ("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND", ModelNotFound),
        ("Request for unknown model: 'nope' is not found", "404", ModelNotFound),
        ("Request for unknown model: 'm' has no available versions", "StatusCode.UNAVAILABLE", ModelNotReady),
        ("unexpected inference input 'X' for model 'simple'", "400", InvalidInput),
        (
            "inference request batch-size must be <= 8 for 'simple'",
            "StatusCode.INVALID_ARGUMENT",
            InvalidInput,
        ),
        ("Exceeds maximum queue size", "StatusCode.UNAVAILABLE", RequestRejected),
        ("Request timeout expired", "503", RequestRejected),
        ("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED", InferenceTimeout),
        ("failed to connect to all addresses", "StatusCode.UNAVAILABLE", ServerUnavailable),
    ],
)
def test_translate_triton_errors(message: str, status: str, kind: type) -> None:
    assert type(translate(InferenceServerException(message, status=status))) is kind


def test_translate_transport_errors() -> None:
    assert isinstance(translate(ConnectionResetError()), ServerUnavailable)
    assert isinstance(translate(TimeoutError()), InferenceTimeout)
    assert isinstance(translate(asyncio.TimeoutError()), InferenceTimeout)
