"""Metrics: those of Triton's vLLM backend (``vllm:prompt_tokens_total``,
``vllm:e2e_request_latency_seconds``..., with its buckets and its labels, model and version),
``vllm:kv_cache_usage_perc`` (vLLM's own name) and ``tritonforge:requests_refused_total``, on
Triton's metrics port, fed by a vLLM stat logger through a thread of their own."""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None


# Triton's vLLM backend's metrics (its src/utils/metrics.py): the names, buckets and labels (model,
# version) its users' dashboards read. Histograms without buckets here take vLLM's 1-2-5 series up
# to max_model_len, as there.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
PHASE_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
N_BUCKETS = (1, 2, 5, 10, 20)
STEP_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MAX_PENDING_UPDATES = 10_000  # engine steps whose metrics wait for the metrics thread; then dropped
# Once a step's update comes, the metrics thread waits this long for the steps after it and applies
# them together: one wake-up for them all, and one increment per counter. A step that finishes a
# request is applied at once, with those before it: its counts are read as soon as its response.
METRICS_PERIOD = 0.25


@dataclass(frozen=True)
class MetricSpec:
    name: str
    description: str
    kind: str  # a pb_utils.MetricFamily kind: COUNTER, GAUGE or HISTOGRAM
    buckets: tuple[float, ...] | None = None  # histograms only; None: 1-2-5 up to max_model_len


def _histogram(name: str, description: str, buckets: tuple[float, ...] | None = None) -> MetricSpec:
    return MetricSpec(name, description, "HISTOGRAM", buckets)


METRICS = (
    MetricSpec("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "COUNTER"),
    MetricSpec("vllm:generation_tokens_total", "Number of generation tokens processed.", "COUNTER"),
    MetricSpec("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", "COUNTER"),
    _histogram(
        "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", STEP_TOKEN_BUCKETS
    ),
    _histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
    ),
    _histogram(
        "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", TPOT_BUCKETS
    ),
    _histogram(
        "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", E2E_BUCKETS
    ),
    _histogram("vllm:request_queue_time_seconds", "Time spent in WAITING phase for request.", PHASE_BUCKETS),
    _histogram(
        "vllm:request_inference_time_seconds", "Time spent in RUNNING phase for request.", PHASE_BUCKETS
    ),
    _histogram(
        "vllm:request_prefill_time_seconds", "Time spent in PREFILL phase for request.", PHASE_BUCKETS
    ),
    _histogram("vllm:request_decode_time_seconds", "Time spent in DECODE phase for request.", PHASE_BUCKETS),
    _histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    _histogram("vllm:request_generation_tokens", "Number of generation tokens processed."),
    _histogram("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS),
    _histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    MetricSpec("vllm:num_requests_running", "Number of requests currently running.", "GAUGE"),
    MetricSpec("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "GAUGE"),
    MetricSpec("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "GAUGE"),
    # vLLM's own name for the same figure since its V1 engine, as its OpenAI server exports it.
    MetricSpec("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "GAUGE"),
    MetricSpec("tritonforge:requests_refused_total", "Requests refused: engine full", "COUNTER"),
)
REFUSED_METRIC = "tritonforge:requests_refused_total"
KINDS = {spec.name: spec.kind for spec in METRICS}


def metric_families() -> dict[str, Any] | None:
    """The custom metric families by name; None when the server has metrics off."""
    family = pb_utils.MetricFamily
    try:
        return {
            spec.name: family(spec.name, spec.description, getattr(family, spec.kind)) for spec in METRICS
        }
    except Exception as exc:  # "metrics not supported" when started with --allow-metrics=false
        pb_utils.Logger.log_warn(f"vllm_engine: custom metrics off ({exc})")
        return None


def metric_buckets(spec: MetricSpec, max_model_len: int) -> list[float]:
    from vllm.v1.metrics.buckets import build_1_2_5_buckets

    return list(spec.buckets) if spec.buckets is not None else list(build_1_2_5_buckets(max_model_len))


def stat_updates(scheduler: Any, iteration: Any) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """One engine step's figures, as Triton's vLLM backend reports them: the gauges' values and
    the (metric, value) pairs that counters add and histograms observe."""
    gauges: dict[str, float] = {}
    if scheduler is not None:
        gauges["vllm:num_requests_running"] = scheduler.num_running_reqs
        gauges["vllm:num_requests_waiting"] = scheduler.num_waiting_reqs
        gauges["vllm:gpu_cache_usage_perc"] = gauges["vllm:kv_cache_usage_perc"] = scheduler.kv_cache_usage
    if iteration is None:
        return gauges, []
    prompt, generated = iteration.num_prompt_tokens, iteration.num_generation_tokens
    counts = [
        ("vllm:prompt_tokens_total", prompt),
        ("vllm:generation_tokens_total", generated),
        ("vllm:num_preemptions_total", iteration.num_preempted_reqs),
        ("vllm:iteration_tokens_total", prompt + generated),
    ]
    added = [(name, value) for name, value in counts if value]
    added += [("vllm:time_to_first_token_seconds", t) for t in iteration.time_to_first_tokens_iter]
    added += [("vllm:time_per_output_token_seconds", t) for t in iteration.inter_token_latencies_iter]
    added += [("vllm:request_params_n", n) for n in iteration.n_params_iter]
    for done in iteration.finished_requests:
        added += [
            ("vllm:e2e_request_latency_seconds", done.e2e_latency),
            ("vllm:request_queue_time_seconds", done.queued_time),
            ("vllm:request_inference_time_seconds", done.inference_time),
            ("vllm:request_prefill_time_seconds", done.prefill_time),
            ("vllm:request_decode_time_seconds", done.decode_time),
            ("vllm:request_prompt_tokens", done.num_prompt_tokens),
            ("vllm:request_generation_tokens", done.num_generation_tokens),
        ]
        if done.max_tokens_param is not None:
            added.append(("vllm:request_params_max_tokens", done.max_tokens_param))
    return gauges, added


class Metrics:
    """One lane's custom metrics on Triton's metrics port; a no-op when metrics are off.

    Each update is a round trip to the server: a thread of its own makes them, so the engine's
    event loop (which calls ``record`` every step) never waits for one. The thread takes the steps
    of a METRICS_PERIOD at once (one wake-up, where one per step cost as much as the updates), and
    adds up their counters into one increment each; histograms observe every value, and gauges
    are set last, to the last step's values. A step that finishes a request cuts the wait short,
    so a request's counts are there about when its final response is, as before. A step whose
    update fails is logged and the thread goes on; past MAX_PENDING_UPDATES waiting steps, new ones
    are dropped (and counted), so a stalled thread never grows memory without bound.
    """

    def __init__(self, families: dict[str, Any] | None, labels: dict[str, str]) -> None:
        self.families, self.labels = families, labels
        self.on = False
        self.updates: queue.Queue[tuple[Any, Any] | None] = queue.Queue(MAX_PENDING_UPDATES)
        self.metrics: dict[str, Any] = {}
        self.gauges: dict[str, float] = {}  # the values last set: a gauge is set only when it moves
        self.dropped = self.failed = 0
        # Cuts the thread's wait for more steps short: a step that finished a request, or close().
        self.flush = threading.Event()
        self.refused = None if families is None else families[REFUSED_METRIC].Metric(labels=labels)

    def start(self, max_model_len: int) -> None:
        """The engine's metrics (its stat logger starts them, knowing max_model_len)."""
        if self.families is None or self.on:
            return
        for spec in METRICS:
            if spec.name != REFUSED_METRIC:
                extra = {"buckets": metric_buckets(spec, max_model_len)} if spec.kind == "HISTOGRAM" else {}
                self.metrics[spec.name] = self.families[spec.name].Metric(labels=self.labels, **extra)
        self.thread = threading.Thread(target=self._update_loop, name="vllm-metrics", daemon=True)
        self.on = True
        self.thread.start()

    def record(self, scheduler: Any, iteration: Any) -> None:
        if not self.on:
            return
        try:
            self.updates.put_nowait((scheduler, iteration))
            if iteration is not None and iteration.finished_requests:
                self.flush.set()
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                pb_utils.Logger.log_error(
                    f"vllm_engine: metrics thread {MAX_PENDING_UPDATES} steps behind: dropping updates"
                )

    def _update_loop(self) -> None:
        """Wait for a step (no wake-up while the engine is idle), then for the steps of a
        METRICS_PERIOD after it (less once one finishes a request), and apply them together; until
        close()."""
        while (first := self.updates.get()) is not None:
            self.flush.wait(METRICS_PERIOD)
            self.flush.clear()  # before the steps are taken: a flush asked meanwhile stays asked
            steps, last = [first], False
            while not last:
                try:
                    update = self.updates.get_nowait()
                except queue.Empty:
                    break
                if update is None:
                    last = True
                else:
                    steps.append(update)
            self._apply(steps)
            if last:
                return

    def _apply(self, steps: Iterable[tuple[Any, Any]]) -> None:
        """The steps' counts first, their gauges last: a reader who sees a step's gauges (the
        engine empty, say) sees its finished requests counted too."""
        counts: dict[str, float] = {}
        gauges: dict[str, float] = {}
        for scheduler, iteration in steps:
            try:
                step_gauges, added = stat_updates(scheduler, iteration)
                for name, value in added:
                    if KINDS[name] == "COUNTER":
                        counts[name] = counts.get(name, 0) + value
                    else:
                        self.metrics[name].observe(value)
                gauges.update(step_gauges)
            except Exception:
                self._failed()
        for name, value in counts.items():
            self._update(self.metrics[name].increment, value)
        for name, value in gauges.items():
            if self.gauges.get(name) != value and self._update(self.metrics[name].set, value):
                self.gauges[name] = value

    def _update(self, update: Any, value: float) -> bool:
        try:
            update(value)
        except Exception:
            self._failed()
            return False
        return True

    def _failed(self) -> None:
        self.failed += 1
        if self.failed == 1:  # the first in full; the count at close()
            pb_utils.Logger.log_error(f"vllm_engine: metrics update failed: {traceback.format_exc()}")

    def close(self) -> None:
        """Metrics go before their families (the stub insists on that order)."""
        if self.on:
            self.on = False
            self.updates.put(None)
            self.flush.set()
            self.thread.join(timeout=5)
        if self.failed or self.dropped:
            pb_utils.Logger.log_warn(
                f"vllm_engine: {self.failed} metrics updates failed, {self.dropped} dropped"
            )
        self.metrics, self.refused, self.families = {}, None, None

    def count_refusal(self) -> None:
        if self.refused is not None:
            self.refused.increment(1)


def stat_logger_factory(metrics: Metrics) -> Any:
    """A vLLM stat-logger factory feeding ``metrics`` (the engine calls it once per engine)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class TritonStatLogger(StatLoggerBase):  # type: ignore[misc]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            metrics.start(int(vllm_config.model_config.max_model_len))

        def record(self, scheduler_stats: Any, iteration_stats: Any, *args: Any, **kwargs: Any) -> None:
            metrics.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger
