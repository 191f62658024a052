"""Triton's Prometheus counters per model, scraped before and after a load point."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from clients.perf.errors import PerfError

COUNTERS = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_input_duration_us": "compute_input_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
    "nv_inference_compute_output_duration_us": "compute_output_us",
}


@dataclass
class ModelCounters:
    success: float = 0.0
    failure: float = 0.0
    inferences: float = 0.0
    executions: float = 0.0
    request_us: float = 0.0
    queue_us: float = 0.0
    compute_input_us: float = 0.0
    compute_infer_us: float = 0.0
    compute_output_us: float = 0.0

    def minus(self, other: ModelCounters) -> ModelCounters:
        return ModelCounters(**{k: v - getattr(other, k) for k, v in asdict(self).items()})

    def per_request(self) -> dict[str, float]:
        """Average server-side split per successful request, in microseconds."""
        n = self.success or float("nan")
        return {
            "requests": self.success,
            "failures": self.failure,
            "avg_batch": self.inferences / self.executions if self.executions else float("nan"),
            "queue_us": self.queue_us / n,
            "compute_input_us": self.compute_input_us / n,
            "compute_infer_us": self.compute_infer_us / n,
            "compute_output_us": self.compute_output_us / n,
            "request_us": self.request_us / n,
        }


def metrics_endpoint(url: str) -> str:
    """Accept host:port, http://host:port or a full .../metrics address."""
    if "://" not in url:
        url = "http://" + url
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def samples(text: str) -> Iterator[Sample]:
    """Every sample of a Prometheus text page as prometheus_client reads it (a histogram's
    ``_bucket``, ``_count`` and ``_sum`` under those names), each named by ``metric_key``;
    ValueError where the text is not Prometheus text."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample._replace(name=metric_key(sample.name))


def metric_key(name: str) -> str:
    """A series' name as matched here: without ``_total``, which prometheus_client puts on every
    sample of a counter whether the page wrote it (``requests_refused_total``) or not
    (``nv_inference_request_success``)."""
    return name.removesuffix("_total")


def parse(text: str) -> dict[str, ModelCounters]:
    """Sum each counter per model over versions (and GPUs)."""
    out: dict[str, ModelCounters] = {}
    for sample in samples(text):
        field = COUNTERS.get(sample.name)
        model = sample.labels.get("model")
        if field is None or model is None:
            continue
        counters = out.setdefault(model, ModelCounters())
        setattr(counters, field, getattr(counters, field) + sample.value)
    return out


def read_page(url: str, timeout_s: float) -> str:
    """The text of the metrics page at ``url`` (any form metrics_endpoint takes)."""
    with urllib.request.urlopen(metrics_endpoint(url), timeout=timeout_s) as resp:
        text: str = resp.read().decode("utf-8", "replace")
    return text


def scrape(url: str, timeout_s: float = 10.0) -> dict[str, ModelCounters]:
    try:
        return parse(read_page(url, timeout_s))
    except OSError as exc:
        raise PerfError(f"cannot read Triton metrics from {metrics_endpoint(url)}: {exc}") from exc
    except ValueError as exc:
        raise PerfError(
            f"Triton metrics from {metrics_endpoint(url)} are not Prometheus text: {exc}"
        ) from exc


def delta(before: dict[str, ModelCounters], after: dict[str, ModelCounters]) -> dict[str, ModelCounters]:
    """Counters that moved between two scrapes (the models a load point touched)."""
    moved = {}
    for model, now in after.items():
        diff = now.minus(before.get(model, ModelCounters()))
        if diff.success or diff.failure:
            moved[model] = diff
    return moved
