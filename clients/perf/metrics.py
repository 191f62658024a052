"""Triton's Prometheus counters per model, scraped before and after a load point."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import asdict, dataclass

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
_LINE = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)")
_MODEL = re.compile(r'model="([^"]*)"')


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


def parse(text: str) -> dict[str, ModelCounters]:
    """Sum each counter per model over versions (and GPUs)."""
    out: dict[str, ModelCounters] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) not in COUNTERS:
            continue
        model = _MODEL.search(m.group(2))
        if not model:
            continue
        counters = out.setdefault(model.group(1), ModelCounters())
        field = COUNTERS[m.group(1)]
        setattr(counters, field, getattr(counters, field) + float(m.group(3)))
    return out


def scrape(url: str, timeout_s: float = 10.0) -> dict[str, ModelCounters]:
    try:
        with urllib.request.urlopen(metrics_endpoint(url), timeout=timeout_s) as resp:
            return parse(resp.read().decode("utf-8", "replace"))
    except OSError as exc:
        raise PerfError(f"cannot read Triton metrics from {metrics_endpoint(url)}: {exc}") from exc


def delta(before: dict[str, ModelCounters], after: dict[str, ModelCounters]) -> dict[str, ModelCounters]:
    """Counters that moved between two scrapes (the models a load point touched)."""
    moved = {}
    for model, now in after.items():
        diff = now.minus(before.get(model, ModelCounters()))
        if diff.success or diff.failure:
            moved[model] = diff
    return moved
