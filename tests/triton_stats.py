"""A model's statistics as tritonserver reports them, read once they count what a test sent.

python_backend (r24.10, ``src/pb_metric_reporter.cc``) reports an execute call's statistics when
its reporter is destroyed, after the responses went out: a client holding its answers can read
statistics that do not count them yet. Nothing signals the moment, so `settled` reads again,
bounded, until the batch statistics (reported last) cover the rows sent.
"""

from __future__ import annotations

import time
from typing import Any

SETTLE_S = 10.0  # far beyond the moment between a response and its statistics
READ_EVERY_S = 0.05


def model_stats(triton: Any, model: str) -> dict[str, Any]:
    """`model`'s entry of tritonclient's (gRPC) ``get_inference_statistics``, as JSON."""
    stats: dict[str, Any] = triton.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return stats


def batch_sizes(stats: dict[str, Any]) -> dict[int, int]:
    """{batch size: execute calls of that size}."""
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def rows_executed(stats: dict[str, Any]) -> int:
    """Rows the model's execute calls have taken, failed requests included."""
    return sum(size * count for size, count in batch_sizes(stats).items())


def settled(triton: Any, model: str, rows: int) -> dict[str, Any]:
    """`model`'s statistics once they count ``rows`` executed rows in all (`rows_executed`); after
    SETTLE_S the last ones read, for the caller's assertions to fail on."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        stats = model_stats(triton, model)
        if rows_executed(stats) >= rows or time.monotonic() > deadline:
            return stats
        time.sleep(READ_EVERY_S)
