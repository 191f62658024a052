"""TTFT, inter-token latency, request latency and throughput of one streamed load point."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from clients.perf.profile_export import Experiment, StreamedRequest

# A request whose 8 or more responses all reached the client within 1 ms was read in one go: no
# engine writes tokens that fast one response at a time, so its TTFT and gaps are the client's
# (perf_analyzer 2.48's gRPC stream has been seen holding a whole answer until its last response
# while the server sent every token on time).
BUNCH_NS = 1_000_000
BUNCH_MIN_RESPONSES = 8


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class StreamStats:
    """Client-side figures of one load point, in milliseconds and per second."""

    requests: int
    unanswered: int
    output_tokens: int
    tokens_per_request_min: int
    tokens_per_request_max: int
    ttft_ms_p50: float
    ttft_ms_p95: float
    ttft_ms_p99: float
    itl_ms_p50: float
    itl_ms_p99: float
    latency_ms_p50: float
    latency_ms_p99: float
    output_tokens_per_s: float
    requests_per_s: float
    duration_s: float
    bunched_requests: int = 0  # requests whose responses the client took in one bunch


def bunched(request: StreamedRequest) -> bool:
    ns = request.response_ns
    return len(ns) >= BUNCH_MIN_RESPONSES and ns[-1] - ns[0] <= BUNCH_NS


def stream_stats(experiment: Experiment) -> StreamStats:
    """Throughput over the span from the first send to the last response of the recorded requests."""
    reqs = experiment.requests
    if not reqs:
        raise ValueError(f"{experiment.mode} {experiment.value:g}: no request got a response")
    ttft = [1000 * r.ttft_s for r in reqs]
    itl = [1000 * gap for r in reqs for gap in r.itl_s]
    latency = [1000 * r.latency_s for r in reqs]
    span = (max(r.response_ns[-1] for r in reqs) - min(r.send_ns for r in reqs)) / 1e9
    tokens = [r.output_tokens for r in reqs]
    return StreamStats(
        requests=len(reqs), unanswered=experiment.unanswered, output_tokens=sum(tokens),
        tokens_per_request_min=min(tokens), tokens_per_request_max=max(tokens),
        ttft_ms_p50=percentile(ttft, 50), ttft_ms_p95=percentile(ttft, 95), ttft_ms_p99=percentile(ttft, 99),
        itl_ms_p50=percentile(itl, 50), itl_ms_p99=percentile(itl, 99),
        latency_ms_p50=percentile(latency, 50), latency_ms_p99=percentile(latency, 99),
        output_tokens_per_s=sum(tokens) / span if span > 0 else math.nan,
        requests_per_s=len(reqs) / span if span > 0 else math.nan, duration_s=span,
        bunched_requests=sum(bunched(r) for r in reqs),
    )  # fmt: skip
