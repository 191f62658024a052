"""The build's data model: options, context, per-model builds, verification reports,
engine results and the build's result.

A leaf of the package: it imports the spec and the stage cache's record and nothing
that runs a stage, so every layer above can share these types without a cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from typing_extensions import NotRequired

from builder.cache import StageCache, StageResult
from builder.errors import UserError
from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.spec import ONNXRUNTIME, ModelSpec, Precision, Spec, Variant
from builder.spec.llm import LLMDType, LLMSpec

Log = Callable[[str], None]

# TensorRT's order of preference among verified variants when no speed was measured.
GPU_PREFERENCE: tuple[Precision, ...] = (Precision.INT8, Precision.FP16, Precision.FP32)


@dataclass(frozen=True)
class BuildOptions:
    spec_file: Path
    repo: Path
    target: str = "auto"  # a registered target's name, or "auto"
    cache_dir: Path | None = None
    require_engines: bool = False
    log: Log = print


@dataclass(frozen=True)
class BuildContext:
    spec: Spec
    spec_file: Path  # as the user wrote it: error messages name it so
    spec_dir: Path
    cache: StageCache
    log: Log


class DetectionJson(TypedDict, total=False):
    """An object detector's boxes (the metrics' "detections" entry): the share matched, the worst
    score difference of a matched pair, the reference's box count."""

    matched: float | None
    score_diff: float | None
    boxes: int | None


class MetricsJson(DetectionJson):
    min_cosine: float | None
    mean_cosine: float | None
    max_abs: float | None
    top1: float | None
    exact: bool | None
    topk: NotRequired[float | None]  # only where the tolerance asks for top-k agreement


class ReportJson(TypedDict, total=False):
    precision: str
    runtime: str
    passed: bool
    metrics: dict[str, MetricsJson]
    failures: list[str]
    ms_per_sample: float | None
    computed_in: str | None  # the precision the runtime reports it used (OpenVINO's, read back)
    batch_max_diff: float | None  # a request's largest change alone vs in a batch, relative
    model_metrics: dict[str, float | None]  # the user's metric on the whole outputs, by its function


@dataclass(frozen=True)
class OutputMetrics:
    min_cosine: float | None
    mean_cosine: float | None
    max_abs: float | None
    top1: float | None
    exact: bool | None
    topk: float | None = None  # top-k agreement, where the tolerance asks for it
    matched: float | None = None  # an object detector's boxes (DetectionJson)
    score_diff: float | None = None
    boxes: int | None = None

    def to_json(self) -> MetricsJson:
        out = MetricsJson(
            min_cosine=_finite(self.min_cosine),
            mean_cosine=_finite(self.mean_cosine),
            max_abs=_finite(self.max_abs),
            top1=_finite(self.top1),
            exact=self.exact,
        )
        if self.topk is not None:
            out["topk"] = _finite(self.topk)
        if self.matched is not None:
            out["matched"], out["score_diff"], out["boxes"] = (
                _finite(self.matched),
                _finite(self.score_diff),
                self.boxes,
            )
        return out

    @classmethod
    def from_json(cls, raw: MetricsJson) -> OutputMetrics:
        exact = raw["exact"]
        return cls(_num(raw["min_cosine"]), _num(raw["mean_cosine"]), _num(raw["max_abs"]), _num(raw["top1"]),
                   None if exact is None else bool(exact), _num(raw.get("topk")), _num(raw.get("matched")),
                   _num(raw.get("score_diff")), raw.get("boxes"))  # fmt: skip


# A request's outputs alone and inside a batch may differ by float rounding (another kernel
# blocking), never by more: relative to the row's largest value. Measured: fp32 and static Q/DQ
# INT8 differ by 3e-8, ONNX Runtime's dynamic INT8 (one scale for the whole batch) by 5e-2.
BATCH_INVARIANCE = 1e-4


@dataclass(frozen=True)
class VerificationReport:
    """One variant against the source model: metrics per output, failures, in-process speed, the
    precision it was computed in, and how far a request's answer moves with its batch mates."""

    variant: Variant
    passed: bool
    metrics: dict[str, OutputMetrics]
    failures: list[str]
    ms_per_sample: float | None = None
    computed_in: str | None = None
    batch_max_diff: float | None = None  # None: not checked (no batching, or the variant failed)
    model_metrics: dict[str, float] = field(default_factory=dict)  # the user's metric, by its function

    @property
    def precision(self) -> Precision:
        return self.variant.precision

    @property
    def batch_invariant(self) -> bool:
        """Whether a request gets the same answer alone as in any batch (unchecked counts as so)."""
        return self.batch_max_diff is None or self.batch_max_diff <= BATCH_INVARIANCE

    def worst(self) -> str:
        """The worst checked figure, for one line of the summary: ``min cos 0.9987``, ``exact``."""
        if any(m.exact is False for m in self.metrics.values()):
            return "differs"
        boxes = [m for m in self.metrics.values() if m.matched is not None]
        if boxes:
            m = boxes[0]
            return f"boxes matched {m.matched:.3f} of {m.boxes}, score diff {m.score_diff or 0.0:.3g}"
        cosines = [m.min_cosine for m in self.metrics.values() if m.min_cosine is not None]
        if cosines:
            return f"min cos {min(cosines):.4f}"
        return "exact" if any(m.exact for m in self.metrics.values()) else ""

    def to_json(self) -> ReportJson:
        out = ReportJson(
            precision=self.variant.precision.value,
            runtime=self.variant.runtime,
            passed=self.passed,
            metrics={name: m.to_json() for name, m in self.metrics.items()},
            failures=list(self.failures),
            ms_per_sample=_finite(self.ms_per_sample),
            computed_in=self.computed_in,
            batch_max_diff=_finite(self.batch_max_diff),
        )
        if self.model_metrics:
            out["model_metrics"] = {name: _finite(v) for name, v in self.model_metrics.items()}
        return out

    @classmethod
    def from_json(cls, raw: ReportJson) -> VerificationReport:
        metrics = {name: OutputMetrics.from_json(m) for name, m in raw["metrics"].items()}
        variant = Variant(Precision(raw["precision"]), raw.get("runtime", ONNXRUNTIME))
        scores = {
            name: float("nan") if v is None else float(v) for name, v in raw.get("model_metrics", {}).items()
        }
        return cls(variant, bool(raw["passed"]), metrics, list(raw["failures"]),
                   _num(raw["ms_per_sample"]), raw.get("computed_in"),
                   _num(raw.get("batch_max_diff")), scores)  # fmt: skip


@dataclass(frozen=True)
class InstalledPlan:
    """A verified TensorRT plan to put in the model's version folder, with its metadata."""

    plan: Path
    metadata: Path


@dataclass(frozen=True)
class EngineSummary:
    """What the engine stage left for the repository: the plan to serve per model."""

    key: str  # changes whenever an installed plan would change
    plans: dict[str, list[InstalledPlan]] = field(default_factory=dict)  # the served one first
    skipped: str | None = None  # why no plan was built here (no TensorRT, no GPU)


@dataclass(frozen=True)
class SizedPoint:
    """One sizing of a variant, measured in process as its target serves it: a lone request's
    latency (concurrency 1) and the rows per second ``CONCURRENCY`` callers get (concurrency 8)."""

    sizing: Sizing
    c1_ms: float
    c8_rows_per_s: float
    allowed: bool = True  # the spec's pins (instances.count, serve.threads) allow it

    def score(self, best_c1_ms: float, best_rows_per_s: float) -> float:
        """How close to the best of both it comes, 1 at best: the product of its latency's and its
        throughput's share of the best among those compared."""
        return (best_c1_ms / self.c1_ms) * (self.c8_rows_per_s / best_rows_per_s)

    def to_json(self) -> dict[str, object]:
        sizing = {"instances": self.sizing.instances, **asdict(self.sizing.knobs)}
        return {
            "sizing": sizing,
            "c1_ms": self.c1_ms,
            "c8_rows_per_s": self.c8_rows_per_s,
            "allowed": self.allowed,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SizedPoint:
        knobs = dict(raw["sizing"])
        sizing = Sizing(int(knobs.pop("instances")), Knobs(**knobs))
        return cls(sizing, float(raw["c1_ms"]), float(raw["c8_rows_per_s"]), bool(raw["allowed"]))


def best_of(points: list[SizedPoint]) -> SizedPoint:
    """The point whose latency and throughput together come closest to the best of each."""
    best_c1, best_rows = min(p.c1_ms for p in points), max(p.c8_rows_per_s for p in points)
    return max(points, key=lambda p: p.score(best_c1, best_rows))


@dataclass(frozen=True)
class SizingReport:
    """A variant's sizings as measured on the building host, and the one it is served at: the best
    that the spec's pins allow."""

    variant: Variant
    points: list[SizedPoint]

    @property
    def chosen(self) -> SizedPoint:
        return best_of([p for p in self.points if p.allowed] or self.points)

    def pinned_note(self) -> str:
        """Where the spec's pins keep a clearly better sizing out (10 % or more by the score), one
        line saying so; else ``""``."""
        best, chosen = best_of(self.points), self.chosen
        c1, rows = min(p.c1_ms for p in self.points), max(p.c8_rows_per_s for p in self.points)
        if best == chosen or chosen.score(c1, rows) >= 0.9 * best.score(c1, rows):
            return ""
        return (
            f"{self.variant.name} served at {chosen.sizing.label} as the spec pins it "
            f"({chosen.c1_ms:.2f} ms, {chosen.c8_rows_per_s:.0f} rows/s); measured best here: "
            f"{best.sizing.label} ({best.c1_ms:.2f} ms, {best.c8_rows_per_s:.0f} rows/s)"
        )

    def to_json(self) -> dict[str, object]:
        return {"points": [p.to_json() for p in self.points], "chosen": self.chosen.sizing.label}

    @classmethod
    def from_json(cls, variant: Variant, raw: dict[str, Any]) -> SizingReport:
        return cls(variant, [SizedPoint.from_json(p) for p in raw["points"]])


@dataclass
class ModelBuild:
    """What the stages produced for one core model."""

    spec: ModelSpec
    variants: dict[Variant, Path] = field(default_factory=dict)  # each variant's ONNX graph
    reports: dict[Variant, VerificationReport] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    calibration_table: Path | None = None
    reference_dir: Path | None = None  # evaluation inputs and the source model's outputs
    served: Variant | None = None
    sizings: dict[Variant, SizingReport] = field(default_factory=dict)  # the race's finalists, sized

    @property
    def passed(self) -> list[Variant]:
        return [v for v in self.variants if self.reports[v].passed]

    def graphs(self, runtime: str = ONNXRUNTIME) -> dict[Precision, Path]:
        """The ONNX graph of each precision ``runtime`` verified (what TensorRT plans start from)."""
        return {v.precision: path for v, path in self.variants.items() if v.runtime == runtime}

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages if not s.skipped)

    def fastest(self, among: list[Variant]) -> Variant | None:
        """The variant of ``among`` that serves best: where some were sized, the one whose chosen
        sizing comes closest to the best latency and throughput among them (``best_of``); else the
        least measured in-process time per sample."""
        sized = [(self.sizings[v].chosen, v) for v in among if v in self.sizings]
        if sized:
            best = best_of([point for point, _ in sized])
            return next(v for point, v in sized if point is best)
        return self.by_time(among)

    def by_time(self, among: list[Variant]) -> Variant | None:
        """The variant of ``among`` with the least measured in-process time per sample."""
        timed = [v for v in among if self.reports[v].ms_per_sample is not None]
        return min(timed, key=lambda v: self.reports[v].ms_per_sample or 0.0, default=None)


@dataclass(frozen=True)
class LLMVerdict:
    """The LLM verify stage's finding: the engine's greedy output against the source model."""

    dtype: LLMDType
    passed: bool
    agreement: float  # share of prompts whose first N tokens agree
    mean_logprob_gap: float
    failures: tuple[str, ...]
    choice: str | None = None  # dtype auto: why this dtype, in one line

    @classmethod
    def from_info(cls, info: dict[str, object]) -> LLMVerdict:
        failures = info.get("failures")
        choice = info.get("choice")
        return cls(
            LLMDType(str(info["dtype"])),
            bool(info["passed"]),
            float(str(info["agreement"])),
            float(str(info["mean_logprob_gap"])),
            tuple(str(f) for f in failures) if isinstance(failures, (list, tuple)) else (),
            str(choice["reason"]) if isinstance(choice, dict) else None,
        )


@dataclass
class LLMBuild:
    """What the stages produced for one LLM: a checked, verified checkpoint."""

    spec: LLMSpec
    checkpoint: Path
    verdict: LLMVerdict
    stages: list[StageResult]
    adapters: dict[str, Path] = field(default_factory=dict)  # LoRA adapter name -> its checked copy

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages if not s.skipped)


@dataclass(frozen=True)
class BuildResult:
    target: str
    repo: Path
    models: list[ModelBuild]
    published: bool
    seconds: float
    engines: EngineSummary | None = None
    llms: list[LLMBuild] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)


@dataclass(frozen=True)
class LeftOut:
    """A model the build left out of the repository, and the user's error that says why."""

    name: str
    error: UserError


def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
