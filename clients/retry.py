"""Retries with exponential backoff and full jitter, for retryable errors only, in a bounded time."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import InferenceTimeout, TritonClientError, translate

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; the n-th wait is uniform in [0, min(max_delay, base_delay * 2**n)];
    no retry starts later than `total` seconds after the first try (nor after the call's timeout)."""

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    total: float = 30.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, min(self.max_delay, self.base_delay * 2**attempt))


NO_RETRY = RetryPolicy(attempts=1)


class Deadline:
    """The time left of one call's budget (None: unbounded)."""

    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def check(self) -> float | None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise InferenceTimeout("time budget exhausted")
        return left


def _next_delay(
    error: TritonClientError, policy: RetryPolicy, attempt: int, deadline: Deadline, retry_end: float
) -> float:
    """How long to wait before the next try; re-raises `error` when no try is left."""
    if not error.retryable or attempt + 1 >= policy.attempts:
        raise error
    delay = policy.delay(attempt)
    left = deadline.remaining()
    if (left is not None and delay >= left) or time.monotonic() + delay >= retry_end:
        raise error
    return delay


def _typed(exc: Exception) -> TritonClientError:
    error = translate(exc)
    if error is not exc:
        error.__cause__ = exc
    return error


def call(fn: Callable[[float | None], T], policy: RetryPolicy, deadline: Deadline) -> T:
    """Run `fn(time_left)` until it succeeds, retrying retryable errors within `deadline`."""
    attempt, retry_end = 0, time.monotonic() + policy.total
    while True:
        try:
            return fn(deadline.check())
        except Exception as exc:
            error = _typed(exc)
            delay = _next_delay(error, policy, attempt, deadline, retry_end)
        time.sleep(delay)
        attempt += 1


async def acall(fn: Callable[[float | None], Awaitable[T]], policy: RetryPolicy, deadline: Deadline) -> T:
    """The asyncio twin of `call`."""
    attempt, retry_end = 0, time.monotonic() + policy.total
    while True:
        try:
            return await fn(deadline.check())
        except Exception as exc:
            error = _typed(exc)
            delay = _next_delay(error, policy, attempt, deadline, retry_end)
        await asyncio.sleep(delay)
        attempt += 1
