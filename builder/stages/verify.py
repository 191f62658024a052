"""The verify stages (``verify-<variant>``): a variant's accuracy against the reference outputs,
whether a request's answer moves with its batch mates, and its in-process speed, with the variant
opened exactly as the served model opens it (``builder.stages.runtimes``).

Arrays carry a leading sample axis. Models with ``max_batch_size: 0`` have no batch
axis, so their samples run one at a time (``batch_size=0``) and outputs are stacked.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from builder.cache import file_hash
from builder.errors import SpecError
from builder.factories import import_factory
from builder.host import kernel_flags
from builder.python_models.shared.runtimes import Knobs, Session
from builder.records import BATCH_INVARIANCE, OutputMetrics, ReportJson, VerificationReport
from builder.spec import ModelSpec, OmitsUnset, Precision, TensorSpec, Tolerance, Variant, as_variant
from builder.spec.detection import Detection
from builder.stages.base import Info, ModelJob, Stage, StageInputs
from builder.stages.fingerprints import module_fingerprint
from builder.stages.reference import REFERENCE, load_reference
from builder.stages.runtimes import open_variant, run_model, run_session
from builder.tasks.object_detection import BoxTolerance, Decoding, verify_boxes

# float64 rounding: identical outputs give a cosine of 1 - 2e-16, which must meet 1.0
ROUNDING = 1e-9
DETECTIONS = "detections"  # the metrics' entry of an object detector's matched boxes (no output's name)


Outputs = dict[str, NDArray[Any]]
# The user's metric (``tolerances.<precision>.metric.function``): the reference's and the candidate's
# outputs in, one float out.
Metric = Callable[[Outputs, Outputs], float]


class VerifyInputs(StageInputs, OmitsUnset):
    STAGE = "verify"
    TOOLS = ("numpy",)
    CODE = ("builder.stages.verify",)
    variant_sha256: str
    reference_key: str
    tolerance: Tolerance
    opt_batch: int
    runtime: str
    runtime_version: str  # the runtime's own package (onnxruntime, openvino)
    precision: str
    # The variant is timed as it is served: its instances, each session's threads and knobs.
    instances: int
    threads: int
    spinning: bool | None
    cpu: list[str]  # the CPU flags that decide its kernels: another CPU verifies and times again
    metric_code: str | None = None  # the user's metric's module, where the tolerance has one
    detection: Detection | None = None  # an object detector's outputs are decoded into boxes so

    OMITTED_WHILE_UNSET = ("metric_code", "detection")


class Verify(Stage):
    """One variant's verification; ``graph`` is the file it serves."""

    def __init__(self, variant: Variant, graph: Path) -> None:
        self.variant = variant
        self.graph = graph
        self.name = f"verify-{variant.name}"

    def inputs(self, job: ModelJob) -> VerifyInputs:
        m, v = job.model, self.variant
        return VerifyInputs(
            variant_sha256=file_hash(self.graph), reference_key=job.result(REFERENCE.name).key,
            tolerance=m.tolerances[v.precision], opt_batch=m.opt_batch(), runtime=v.runtime,
            runtime_version=v.cpu_runtime.version(), precision=v.precision.value,
            instances=m.instances.count, threads=job.knobs.threads, spinning=job.knobs.spinning,
            cpu=kernel_flags(), metric_code=metric_fingerprint(m.tolerances[v.precision], job),
            detection=m.detection,
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        inputs, reference = load_reference(job.result(REFERENCE.name).out)
        metric = user_metric(job, self.variant.precision)
        report = verify_variant(job.model, self.variant, self.graph, inputs, reference, job.knobs, metric)
        return dict(report.to_json())

    @staticmethod
    def report(info: Info) -> VerificationReport:
        return VerificationReport.from_json(cast(ReportJson, info))


def decoding(model: ModelSpec) -> Decoding | None:
    """How the server decodes the model's outputs into boxes (None: not an object detector)."""
    return model.detection.decoding() if model.detection is not None else None


def metric_fingerprint(tolerance: Tolerance | None, job: ModelJob) -> str | None:
    """The user's metric's code, for the keys of the stages that judge by it."""
    if tolerance is None or tolerance.metric is None:
        return None
    return module_fingerprint(tolerance.metric.function, job.ctx.spec_dir)


def user_metric(job: ModelJob, precision: Precision) -> Metric | None:
    """The function ``tolerances.<precision>.metric`` names, imported as a factory is."""
    tolerance = job.model.tolerances.get(precision)
    if tolerance is None or tolerance.metric is None:
        return None
    field = f"tolerances.{precision.value}.metric.function"
    ctx = job.ctx
    return import_factory(
        tolerance.metric.function, ctx.spec_dir, spec_file=ctx.spec_file, model=job.model.name, field=field
    )


@dataclass(frozen=True)
class Judgement:
    """A candidate's outputs against the reference: metrics per output, the user's metric on the
    whole outputs, and the failures under the tolerance."""

    metrics: dict[str, OutputMetrics]
    failures: list[str]
    model_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures


def compare(
    reference: dict[str, NDArray[Any]],
    candidate: dict[str, NDArray[Any]],
    tolerance: Tolerance,
    outputs: list[TensorSpec],
    detection: Decoding | None = None,
) -> tuple[dict[str, OutputMetrics], list[str]]:
    """Metrics for every output; failures (``output 'x' ...``) only for the checked ones. A
    detector's ``detection`` tolerance is its task's metric: both sides decoded into boxes as the
    server decodes them (``detection``, ``decoding(model)``), boxes matched (``DETECTIONS``)."""
    judged = judge(reference, candidate, tolerance, outputs, detection=detection)
    return judged.metrics, judged.failures


def judge(
    reference: dict[str, NDArray[Any]],
    candidate: dict[str, NDArray[Any]],
    tolerance: Tolerance,
    outputs: list[TensorSpec],
    metric: Metric | None = None,
    detection: Decoding | None = None,
) -> Judgement:
    """:func:`compare`, and the user's ``metric`` (the tolerance's ``metric``) on the whole outputs:
    what the verify stage and every trial of the INT8 search judge a candidate by."""
    metrics: dict[str, OutputMetrics] = {}
    failures: list[str] = []
    if tolerance.detection is not None:
        failures += _judge_boxes(reference, candidate, tolerance, detection, metrics)
    checked = set(tolerance.outputs) or {o.name for o in outputs}
    if tolerance.detection is not None and not tolerance.outputs:
        checked = set()  # the boxes are what is checked; each output's figures are still recorded
    k = tolerance.topk.k if tolerance.topk is not None else None
    for spec in outputs:
        if spec.name not in reference:
            if spec.name in checked:
                failures.append(f"output '{spec.name}' has no reference to compare against")
            continue
        ref, cand = reference[spec.name], candidate.get(spec.name)
        if cand is None:
            failures.append(f"output '{spec.name}' is missing")
            continue
        if ref.shape != cand.shape:
            failures.append(f"output '{spec.name}' has shape {list(cand.shape)}, reference {list(ref.shape)}")
            continue
        metrics[spec.name] = output_metrics(ref, cand, k)
        failures += _nonfinite(spec.name, ref, cand)
        if spec.name in checked:
            failures += _over(spec, metrics[spec.name], tolerance)
    scores: dict[str, float] = {}
    if tolerance.metric is not None and metric is not None:
        bound = tolerance.metric
        got = float(metric(reference, candidate))
        scores[bound.function] = got
        if bound.min is not None and not got >= bound.min - ROUNDING:
            failures.append(f"metric {bound.function} {got:.4f} < {bound.min} allowed")
        if bound.max is not None and not got <= bound.max + ROUNDING:
            failures.append(f"metric {bound.function} {got:.4g} > {bound.max} allowed")
    return Judgement(metrics, failures, scores)


def _judge_boxes(
    reference: Outputs,
    candidate: Outputs,
    tolerance: Tolerance,
    detection: Decoding | None,
    metrics: dict[str, OutputMetrics],
) -> list[str]:
    """Both sides' boxes matched (into ``metrics[DETECTIONS]``); the failures."""
    t = tolerance.detection
    assert t is not None
    if detection is None:
        return ["detections: the tolerance matches boxes, and the model has no detection block"]
    bounds = BoxTolerance(t.min_matched, t.iou, t.max_score_diff)
    found, failed = verify_boxes(reference, candidate, detection, bounds)
    metrics[DETECTIONS] = OutputMetrics(
        None, None, None, None, None, matched=found.matched, score_diff=found.score_diff, boxes=found.boxes
    )
    return failed


def margin(judged: Judgement, tolerance: Tolerance) -> float:
    """How far the worst checked figure is inside its bound, as a share of what the bound allows
    (0 at the bound, negative when out of it): what ranks trials that all fail."""
    slack: list[float] = []
    for m in judged.metrics.values():
        if m.matched is not None and tolerance.detection is not None:
            need = tolerance.detection.min_matched
            slack.append((m.matched - need) / max(1.0 - need, 1e-6))
            continue
        if m.exact is not None:
            slack.append(0.0 if m.exact or not tolerance.exact else -1.0)
            continue
        topk = tolerance.topk.min if tolerance.topk else None
        pairs = [(m.min_cosine, tolerance.min_cosine), (m.mean_cosine, tolerance.mean_cosine),
                 (m.top1, tolerance.top1), (m.topk, topk)]  # fmt: skip
        for got, limit in pairs:
            if got is not None and limit is not None:
                slack.append((got - limit) / max(1.0 - limit, 1e-6))
        if tolerance.max_abs is not None and m.max_abs is not None:
            slack.append((tolerance.max_abs - m.max_abs) / max(tolerance.max_abs, 1e-12))
    bound = tolerance.metric
    for got in judged.model_metrics.values():
        if bound is not None:
            sign = 1.0 if bound.min is not None else -1.0
            slack.append(sign * (got - bound.bound) / max(abs(bound.bound), 1e-6))
    worst = min((x if np.isfinite(x) else -1e9 for x in slack), default=0.0)
    return min(worst, -1.0) if judged.failures and worst >= 0 else worst  # NaN, a missing output


def sample_cosines(
    reference: dict[str, NDArray[Any]], candidate: dict[str, NDArray[Any]], outputs: list[TensorSpec]
) -> NDArray[Any]:
    """Each sample's worst cosine over the float outputs: which samples a candidate fails worst."""
    worst: NDArray[Any] | None = None
    for spec in outputs:
        ref, cand = reference.get(spec.name), candidate.get(spec.name)
        if ref is None or cand is None or ref.dtype.kind not in "fc" or ref.shape != cand.shape:
            continue
        a = ref.reshape(ref.shape[0], -1).astype(np.float64)
        cos = _cosines(a, cand.reshape(cand.shape[0], -1).astype(np.float64))
        worst = cos if worst is None else np.minimum(worst, cos)
    count = next(iter(reference.values())).shape[0]
    return worst if worst is not None else np.ones(count)


def output_metrics(ref: NDArray[Any], cand: NDArray[Any], k: int | None = None) -> OutputMetrics:
    if ref.dtype.kind not in "fc" or cand.dtype.kind not in "fc":
        return OutputMetrics(None, None, None, None, exact=bool(np.array_equal(ref, cand)))
    a = ref.reshape(ref.shape[0], -1).astype(np.float64)
    b = cand.reshape(cand.shape[0], -1).astype(np.float64)
    cos = _cosines(a, b)
    diff = np.abs(a - b)
    max_abs = float(np.max(diff))  # NaN when any value is NaN: fails every max_abs check
    top1 = topk = None
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        top1 = float(np.mean(np.argmax(ref, axis=-1) == np.argmax(cand, axis=-1)))
        if k is not None:
            topk = top_k_agreement(ref, cand, k)
    return OutputMetrics(float(cos.min()), float(cos.mean()), max_abs, top1, exact=None, topk=topk)


def top_k_agreement(ref: NDArray[Any], cand: NDArray[Any], k: int) -> float:
    """The mean share of the reference's ``k`` best classes (last axis) among the candidate's ``k`` best."""
    k = min(k, ref.shape[-1])
    best_ref = np.argsort(-ref.reshape(-1, ref.shape[-1]), axis=-1, kind="stable")[:, :k]
    best_cand = np.argsort(-cand.reshape(-1, cand.shape[-1]), axis=-1, kind="stable")[:, :k]
    shared = [len(np.intersect1d(r, c)) for r, c in zip(best_ref, best_cand, strict=True)]
    return float(np.mean(shared)) / k


def _cosines(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """Per-sample cosine; two zero vectors agree (1), one zero vector does not (0)."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos = np.sum(a * b, axis=1) / (na * nb)
    cos = np.where((na == 0) & (nb == 0), 1.0, cos)
    cos = np.where((na == 0) ^ (nb == 0), 0.0, cos)
    return np.where(np.isfinite(cos), np.clip(cos, -1.0, 1.0), -1.0)


def _nonfinite(name: str, ref: NDArray[Any], cand: NDArray[Any]) -> list[str]:
    if cand.dtype.kind not in "fc":
        return []
    bad = ~np.isfinite(cand) & np.isfinite(ref)
    count = int(bad.sum())
    return [f"output '{name}' has {count} NaN/inf values where the reference is finite"] if count else []


def _over(spec: TensorSpec, m: OutputMetrics, tol: Tolerance) -> list[str]:
    out = []
    name = f"output '{spec.name}'"
    if m.exact is not None:
        if tol.exact and not m.exact:
            out.append(f"{name} differs from the reference (exact required)")
        return out
    for what in ("min_cosine", "mean_cosine", "top1"):
        got, limit = getattr(m, what), getattr(tol, what)
        if limit is not None and got is not None and not got >= limit - ROUNDING:
            out.append(f"{name} {what} {got:.4f} < {limit} allowed")
    if tol.topk is not None and m.topk is not None and not m.topk >= tol.topk.min - ROUNDING:
        out.append(f"{name} top{tol.topk.k} agreement {m.topk:.4f} < {tol.topk.min} allowed")
    if tol.max_abs is not None and m.max_abs is not None and not m.max_abs <= tol.max_abs:
        out.append(f"{name} max_abs {m.max_abs:.4g} > {tol.max_abs} allowed")
    return out


def verify_variant(
    model: ModelSpec,
    variant: Variant | Precision,
    onnx_path: Path,
    inputs: dict[str, NDArray[Any]],
    reference: dict[str, NDArray[Any]],
    knobs: Knobs | None = None,
    metric: Metric | None = None,
) -> VerificationReport:
    """Check whether a row's answer moves with the rows beside it, then run the variant on
    ``inputs`` as it will be served (a variant whose answer moves runs each row alone: row by row,
    and timed at batch 1), compare with ``reference`` under its precision's tolerance and time it."""
    variant = as_variant(variant)
    tolerance = model.tolerances.get(variant.precision)
    field = f"tolerances.{variant.precision.value}"
    if tolerance is None:
        raise SpecError("no tolerance for this precision", model=model.name, field=field)
    unknown = sorted(set(tolerance.outputs) - {o.name for o in model.outputs})
    if unknown:
        raise SpecError(f"outputs {unknown} are not outputs of the model", model=model.name, field=field)
    sess = open_variant(variant, onnx_path, model, knobs)
    drift = batch_drift(sess, model, inputs)
    alone = drift is not None and drift > BATCH_INVARIANCE
    label = f"verify {model.name} {variant.name}"
    if alone:  # served row by row (a batched model without states: batch_drift measured it)
        candidate = run_session(sess, inputs, batch_size=1, label=label)
    else:
        candidate = run_model(sess, model, inputs, label=label)
    if tolerance.metric is not None and metric is None:
        raise SpecError(f"{field}.metric: the metric's function was not given", model=model.name, field=field)
    judged = judge(reference, candidate, tolerance, model.outputs, metric, decoding(model))
    failures = [f"{variant.name}: {f}" for f in judged.failures]
    ms = _time_session(sess, model, inputs, batch=1 if alone else None)
    return VerificationReport(
        variant, not failures, judged.metrics, failures, ms, sess.computed_in, drift, judged.model_metrics
    )


def time_variant(
    model: ModelSpec,
    onnx_path: Path,
    inputs: dict[str, NDArray[Any]],
    *,
    repeats: int = 5,
    variant: Variant | None = None,
    knobs: Knobs | None = None,
) -> float:
    """In-process ms per sample at ``model.opt_batch()``: median of ``repeats`` after a warm-up, on
    ``variant``'s runtime (default: ONNX Runtime, FP32) opened as served with ``knobs``."""
    sess = open_variant(variant or Variant(Precision.FP32), onnx_path, model, knobs)
    return _time_session(sess, model, inputs, repeats=repeats)


def batch_drift(sess: Session, model: ModelSpec, inputs: dict[str, NDArray[Any]]) -> float | None:
    """How far a row's outputs move between running alone and running inside one run with other
    samples (first and last place of the run): the largest difference relative to the row's
    largest value. None where Triton never batches the model (no batch axis, a stateful model).
    A run of several rows is what one request of several rows is, and what Triton's batcher makes
    of several requests: where the row moves, the served model runs every row alone.

    Mates have the request's own shape: Triton's batcher and the onnx_runner batch only requests of
    the same shape, so no request is ever padded to a longer mate's length."""
    batch = min(max(model.opt_batch(), 4), model.max_batch_size)
    if batch < 2 or model.sequence is not None:
        return None
    together = {k: _mixed(v, batch) for k, v in inputs.items()}
    names = sess.output_names
    batched = sess.run(names, together)
    worst = 0.0
    for row in (0, batch - 1):
        alone = sess.run(names, {k: v[row : row + 1] for k, v in together.items()})
        for a, b in zip(alone, batched, strict=True):
            worst = max(worst, _relative_change(a[0], b[row]))
    return worst


def _mixed(array: NDArray[Any], n: int) -> NDArray[Any]:
    """``n`` samples whose first and last differ from their neighbours where the data allows."""
    taken = _take(array, n)
    if array.shape[0] > 1:
        taken = taken.copy()
        taken[-1] = array[-1]  # the last sample, not a repeat of the first
    return taken


def _relative_change(alone: NDArray[Any], batched: NDArray[Any]) -> float:
    if alone.dtype.kind not in "fc":
        return 0.0 if np.array_equal(alone, batched) else float("inf")
    a, b = alone.astype(np.float64), batched.astype(np.float64)
    scale = max(float(np.max(np.abs(b), initial=0.0)), 1e-12)
    return float(np.max(np.abs(a - b), initial=0.0)) / scale


def _time_session(
    sess: Session,
    model: ModelSpec,
    inputs: dict[str, NDArray[Any]],
    *,
    repeats: int = 5,
    batch: int | None = None,
) -> float:
    batch = batch or model.opt_batch()
    feed = {k: _take(v, batch) for k, v in inputs.items()}
    if not model.batched:
        feed = {k: np.asarray(v[0]) for k, v in feed.items()}  # rank 0 stays an array
        batch = 1
    if model.sequence is not None:
        from builder.stages.sequence import first_step_feed

        feed = first_step_feed(model, feed)
    sess.run(None, feed)  # warm-up
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0 / batch


def _take(array: NDArray[Any], n: int) -> NDArray[Any]:
    """The first ``n`` samples, repeating them when there are fewer."""
    reps = -(-n // array.shape[0])
    return np.concatenate([array] * reps)[:n] if reps > 1 else array[:n]
