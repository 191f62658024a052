"""The LLM model's own metrics on Triton's metrics port, as they moved over one load point.

The ``vllm_engine`` model exports ``vllm:time_to_first_token_seconds`` and
``vllm:time_per_output_token_seconds`` (histograms), ``vllm:num_requests_running`` /
``vllm:num_requests_waiting`` / ``vllm:kv_cache_usage_perc`` (gauges) and
``tritonforge:requests_refused_total``, one series per lane; Triton adds
``nv_inference_request_success`` / ``_failure``. Lanes are summed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from clients.perf.errors import PerfError
from clients.perf.metrics import metric_key, metrics_endpoint, read_page, samples

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:time_per_output_token_seconds"
REFUSED = "tritonforge:requests_refused_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
SUCCESS = "nv_inference_request_success"
FAILURE = "nv_inference_request_failure"
_SUMMED = {metric_key(name): name for name in (REFUSED, KV_USAGE, SUCCESS, FAILURE)}


@dataclass
class Histogram:
    count: float = 0.0
    total: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count

    def minus(self, other: Histogram) -> Histogram:
        return Histogram(self.count - other.count, self.total - other.total,
                         {le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()})  # fmt: skip

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def quantile_bound(self, q: float) -> float:
        """Upper bound of the bucket holding quantile ``q`` (0-1): all a histogram can say."""
        if not self.count:
            return math.nan
        for le in sorted(self.buckets):
            if self.buckets[le] >= q * self.count:
                return le
        return math.inf


@dataclass
class ModelMetrics:
    histograms: dict[str, Histogram] = field(default_factory=lambda: defaultdict(Histogram))
    counters: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def minus(self, other: ModelMetrics) -> ModelMetrics:
        moved = ModelMetrics()
        for name, h in self.histograms.items():
            moved.histograms[name] = h.minus(other.histograms.get(name, Histogram()))
        for name, v in self.counters.items():
            moved.counters[name] = v - other.counters.get(name, 0.0)
        return moved


def parse(text: str, model: str) -> ModelMetrics:
    """The series of ``model`` (all lanes summed); gauges are summed as read."""
    out = ModelMetrics()
    for sample in samples(text):
        name, labels, value = sample.name, sample.labels, sample.value
        if labels.get("model") != model:
            continue
        for family in (TTFT, TPOT):
            if name == family + "_bucket":
                h = out.histograms[family]
                le = float(labels["le"])
                h.buckets[le] = h.buckets.get(le, 0.0) + value
            elif name == family + "_count":
                out.histograms[family].count += value
            elif name == family + "_sum":
                out.histograms[family].total += value
        if name in _SUMMED:
            out.counters[_SUMMED[name]] += value
    return out


def scrape(url: str, model: str, timeout_s: float = 10.0) -> ModelMetrics:
    try:
        return parse(read_page(url, timeout_s), model)
    except OSError as exc:
        raise PerfError(f"cannot read metrics from {metrics_endpoint(url)}: {exc}") from exc
    except ValueError as exc:
        raise PerfError(f"{metrics_endpoint(url)} is not Prometheus text: {exc}") from exc


@dataclass(frozen=True)
class ServerStats:
    """What the server saw over a load point (NaN where the model exports nothing)."""

    requests: float
    failures: float
    refused: float
    ttft_ms_mean: float
    ttft_ms_p50_bound: float
    ttft_ms_p99_bound: float
    tpot_ms_mean: float
    kv_cache_usage_after: float


def server_stats(before: ModelMetrics, after: ModelMetrics) -> ServerStats:
    moved = after.minus(before)
    ttft, tpot = moved.histograms.get(TTFT, Histogram()), moved.histograms.get(TPOT, Histogram())
    return ServerStats(
        requests=moved.counters.get(SUCCESS, math.nan), failures=moved.counters.get(FAILURE, math.nan),
        refused=moved.counters.get(REFUSED, math.nan),
        ttft_ms_mean=1000 * ttft.mean(), ttft_ms_p50_bound=1000 * ttft.quantile_bound(0.5),
        ttft_ms_p99_bound=1000 * ttft.quantile_bound(0.99), tpot_ms_mean=1000 * tpot.mean(),
        kv_cache_usage_after=after.counters.get(KV_USAGE, math.nan),
    )  # fmt: skip
