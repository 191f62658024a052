"""The model's own bounded line: where Triton's queue policy is left out (it stalls tritonserver
2.51's batcher), requests wait here, at most ``max_queue_size`` of them, each refused once the
worker's measured pace says it cannot be answered within its timeout."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from numpy.typing import NDArray

from ..contract import ALLOW_TIMEOUT_OVERRIDE, MAX_QUEUE_SIZE, QUEUE_TIMEOUT_US

# The share of a timeout the line plans to use: the rest is for what it cannot see (the request's
# way to the model and back, the pace changing on a shared machine).
HEADROOM = 0.5


class BoundedLine:
    """Requests waiting for the worker, oldest first: at most ``limit`` (0: any number). With a
    timeout, a request is refused at arrival when the worker's measured pace says the line ahead
    of it takes longer (Triton refuses only on queue time; here the timeout bounds the whole
    answer, which is what a caller waits for), and when its batch is formed if it waited past
    its deadline."""

    def __init__(self, limit: int, timeout_us: int, allow_override: bool) -> None:
        self.limit = limit
        self.timeout_us = timeout_us
        self.allow_override = allow_override
        self.waiting: deque[tuple[Any, int, int]] = deque()  # (request, batch rows, deadline ns)
        self.ready = threading.Condition()
        self.closed = False
        self.rows_ahead = 0  # rows waiting plus rows running
        self.ns_per_row = 0.0  # the worker's measured pace (0 until the second batch)
        self.batches = 0

    @staticmethod
    def from_params(params: dict[str, str], instances: int) -> BoundedLine | None:
        """The spec's bound is the model's: each instance (its own process) holds its share."""
        limit = -(-int(params.get(MAX_QUEUE_SIZE, "0") or 0) // instances)
        timeout_us = int(params.get(QUEUE_TIMEOUT_US, "0") or 0)
        if limit <= 0 and timeout_us <= 0:
            return None
        override = params.get(ALLOW_TIMEOUT_OVERRIDE, "true").lower() == "true"
        return BoundedLine(limit, timeout_us, override)

    def offer(self, requests: list[Any]) -> list[tuple[Any, str]]:
        """Queue the requests Triton handed over together (they stay together, as Triton's own
        warm-up batches must); the refused ones with their messages."""
        refused = []
        with self.ready:
            for request in requests:
                refusal = self._admit(request)
                if refusal is not None:
                    refused.append((request, refusal))
            self.ready.notify()
        return refused

    def _admit(self, request: Any) -> str | None:
        timeout_us = self.timeout_us
        if self.allow_override and 0 < request.timeout_us < timeout_us:  # as Triton overrides
            timeout_us = request.timeout_us
        now, rows = time.monotonic_ns(), request.rows
        deadline = now + int(timeout_us * 1000 * HEADROOM) if timeout_us else 0
        if self.closed:
            return "Server is stopping: the model accepts no new requests"
        if self.limit and len(self.waiting) >= self.limit:
            return f"Exceeds maximum queue size ({self.limit} requests waiting)"
        ahead = self.rows_ahead
        if deadline and ahead and now + (ahead + rows) * self.ns_per_row > deadline:  # a lone one runs
            return f"Request timeout expired: the {ahead} rows ahead would take longer"
        self.waiting.append((request, rows, deadline))
        self.rows_ahead += rows
        return None

    def take(self, max_rows: int) -> list[tuple[Any, bool]] | None:
        """The oldest requests that fit in ``max_rows`` batch rows, each with whether its deadline
        has passed; blocks while none wait; None once closed and empty."""
        with self.ready:
            while not self.waiting:
                if self.closed:
                    return None
                self.ready.wait()
            now, rows = time.monotonic_ns(), 0
            batch: list[tuple[Any, bool]] = []
            max_rows = self._rows_in_time(max_rows)
            while self.waiting:
                request, size, deadline = self.waiting[0]
                late = bool(deadline) and now > deadline
                if not late and batch and rows + size > max_rows:
                    break
                self.waiting.popleft()
                batch.append((request, late))
                rows += 0 if late else size
                self.rows_ahead -= size if late else 0
        return batch

    def _rows_in_time(self, max_rows: int) -> int:
        """On a slow pace, smaller batches: one batch runs in at most a quarter of the timeout."""
        if not (self.timeout_us and self.ns_per_row):
            return max_rows
        return max(1, min(max_rows, int(self.timeout_us * 1000 * HEADROOM / 4 / self.ns_per_row)))

    def done(self, rows: int, seconds: float) -> None:
        """The worker ran a batch of ``rows`` in ``seconds``: they are no longer ahead."""
        with self.ready:
            self.rows_ahead = max(0, self.rows_ahead - rows)
            self._pace(rows, seconds)

    def paced(self, rows: int, seconds: float) -> None:
        """A batch answered outside the line took ``seconds``: the pace learns from it too."""
        with self.ready:
            self._pace(rows, seconds)

    def _pace(self, rows: int, seconds: float) -> None:
        """The pace per row, a moving average over batches after the slow cold first one."""
        self.batches += 1
        if rows and self.batches > 1:
            pace = seconds * 1e9 / rows
            self.ns_per_row = pace if not self.ns_per_row else 0.7 * self.ns_per_row + 0.3 * pace

    def idle(self) -> bool:
        """Nothing waiting and nothing running (``execute`` is the only one adding to the line,
        so this stays true while it answers a batch itself)."""
        with self.ready:
            return self.rows_ahead == 0 and not self.closed

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()


class Pending:
    """A request as the worker needs it: its sender, copies of its inputs (or why they failed) and
    the names of the outputs it asked for."""

    __slots__ = ("error", "feed", "rows", "sender", "timeout_us", "wanted")

    def __init__(
        self,
        sender: Any,
        feed: dict[str, NDArray[Any]],
        error: str | None,
        rows: int,
        timeout_us: int,
        wanted: frozenset[str],
    ):
        self.sender, self.feed, self.error, self.rows = sender, feed, error, rows
        self.timeout_us, self.wanted = timeout_us, wanted
