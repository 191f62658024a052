"""The int8 stage: the static INT8 graph (explicit Q/DQ) from the calibration of ``int8-ranges``,
by the recipe of the target that serves it (ONNX Runtime's, or TensorRT's with its calibration
table where the spec asks for TensorRT 10's implicit INT8), found by the INT8 search.

The search (``builder/stages/search.py``, docs/quantization.md) tries each calibration method's
ranges, symmetric and, where the recipe's runtimes take them, asymmetric, then keeps the fewest
nodes in float that make the variant verify; every trial is judged as the verify stage judges (the
same ``judge``, the user's metric included), on the variant opened exactly as served on every
runtime its INT8 variants run on, on the evaluation samples that failed worst first. The verify
stages afterwards stay the gate on every sample. Its key holds the search's settings, the
tolerance, the reference, the runtimes' versions and the CPU flags: a rebuild with nothing changed
searches nothing.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.cache import arrays_hash, key_of
from builder.errors import ModelRefused
from builder.host import kernel_flags
from builder.progress import Progress, progress
from builder.spec import ModelSpec, OmitsUnset, Precision, Tolerance, Variant
from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact, settle
from builder.stages.check import CHECK
from builder.stages.int8_ranges import INT8_RANGES
from builder.stages.qdq_error import TENSORRT_FUSED, rank_nodes
from builder.stages.quantize import (
    SEARCHED_METHODS,
    SMOOTHED,
    Calibrated,
    Int8Config,
    Int8Recipe,
    calibration_samples,
    int8_recipe,
    method_name,
    quantize_calibrated,
    quantize_config,
)
from builder.stages.reference import REFERENCE, load_reference
from builder.stages.runtimes import open_variant, run_model
from builder.stages.search import Budget, Outcome, Ranked, SearchResult, search
from builder.stages.verify import (
    Judgement,
    Metric,
    decoding,
    judge,
    margin,
    metric_fingerprint,
    sample_cosines,
)
from builder.stages.verify import time_variant as timed
from builder.stages.verify import user_metric as metric_of

TABLE = "calibration.cache"  # TensorRT's calibration table, beside the graph
WORST_SHARE = 4  # trials with nodes in float run first on the worst quarter of the samples...
WORST_AT_LEAST = 8  # ... and at least this many


class Int8Inputs(StageInputs, OmitsUnset):
    STAGE = "int8"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = ("builder.stages.int8",)
    ranges_key: str
    recipe: dict[str, bool]
    # What the search's trials are judged by and on (None: no search, the spec's method alone).
    search: dict[str, Any] | None = None

    OMITTED_WHILE_UNSET = ("search",)


class Int8(Stage):
    name = Int8Inputs.STAGE

    def inputs(self, job: ModelJob) -> Int8Inputs:
        recipe = int8_recipe(job.tensorrt, job.model)
        return Int8Inputs(
            ranges_key=job.result(INT8_RANGES.name).key, recipe=recipe.fields(), search=_search_key(job)
        )

    def run(self, job: ModelJob, out: Path) -> Info:
        ranges = job.result(INT8_RANGES.name)
        fp32 = job.graph(CHECK.name)
        recipe = int8_recipe(job.tensorrt, job.model)
        # A smoothed source is not the graph TensorRT parses (fp32): its table is calibrated apart.
        source = ranges.out / SMOOTHED if ranges.info["smoothed"] else fp32
        calibrated = Calibrated.read(ranges.out, source, ranges.info)
        found: dict[str, Any] | None = None
        config = None
        if _searches(job):
            with tempfile.TemporaryDirectory(prefix="search.", dir=out) as tmp:
                found, config = Searcher(job, calibrated, recipe, Path(tmp)).run()
        samples = calibration_samples(job) if recipe.calibration_table else None
        result = quantize_calibrated(
            job.model, calibrated, out, recipe, samples=samples, tensorrt_graph=fp32, config=config
        )
        settle(result.onnx, out / GRAPH)
        if result.calibration_table is not None:
            settle(result.calibration_table, out / TABLE)
        note = {"note": result.note} if result.note else {}
        return artifact(out / GRAPH) | note | ({"search": found} if found else {})


def _searches(job: ModelJob) -> bool:
    cal = job.model.calibration
    return cal is not None and cal.search.max_trials > 0 and Precision.INT8 in job.model.tolerances


def _runtimes(model: ModelSpec) -> list[str]:
    """The runtimes the model's INT8 variants run on: a trial verifies on each."""
    return [v.runtime for v in model.variants() if v.precision is Precision.INT8]


def _reference_content(job: ModelJob) -> str:
    """The evaluation samples and the source's outputs the trials are judged against, by content:
    a re-export that gives the same answers searches nothing again."""
    inputs, reference = load_reference(job.result(REFERENCE.name).out)
    return key_of(arrays_hash(inputs), arrays_hash(reference))


def _search_key(job: ModelJob) -> dict[str, Any] | None:
    if not _searches(job):
        return None
    model = job.model
    assert model.calibration is not None
    tolerance = model.tolerances[Precision.INT8]
    boxes = {"detection": model.detection.model_dump(mode="json")} if model.detection else {}
    return boxes | {
        "settings": model.calibration.search.model_dump(mode="json"),
        "tolerance": tolerance.model_dump(mode="json"),
        "metric_code": metric_fingerprint(tolerance, job),
        "reference": _reference_content(job),
        "runtimes": {r: Variant(Precision.INT8, r).cpu_runtime.version() for r in _runtimes(model)},
        # Not the serving knobs: threads change a trial's speed, not its answers, so the local and
        # cpu targets share one search (the speed it reports is the first one's).
        "cpu": kernel_flags(),
    }


@dataclass
class Searcher:
    """One model's INT8 search: its trials made and judged here, its logic in ``search``."""

    job: ModelJob
    calibrated: Calibrated
    recipe: Int8Recipe
    tmp: Path
    inputs: dict[str, NDArray[Any]] = field(init=False)
    reference: dict[str, NDArray[Any]] = field(init=False)
    metric: Metric | None = field(init=False)
    worst: NDArray[Any] | None = None  # the samples the kept method failed worst, judged first
    cosines: dict[Int8Config, NDArray[Any]] = field(default_factory=dict)  # each sample's, per trial
    graphs: dict[Int8Config, Path] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # runtimes that could not judge, and why
    bar: Progress | None = None
    last_cosines: NDArray[Any] | None = None

    def __post_init__(self) -> None:
        self.inputs, self.reference = load_reference(self.job.result(REFERENCE.name).out)
        self.metric = metric_of(self.job, Precision.INT8)

    @property
    def tolerance(self) -> Tolerance:
        return self.job.model.tolerances[Precision.INT8]

    def run(self) -> tuple[dict[str, Any], Int8Config | None]:
        model = self.job.model
        assert model.calibration is not None
        settings = model.calibration.search
        start = time.perf_counter()
        budget = Budget(settings.max_trials, settings.max_seconds)
        with progress(settings.max_trials, f"int8 search {model.name}", unit="trial") as bar:
            self.bar = bar
            result = search(self.methods(), self.trial, self.rank, budget)
        kept = result.chosen or (best.config if (best := result.best()) is not None else None)
        speed = self.speed(result) if result.chosen is not None else {}
        found = self.record(result, speed, time.perf_counter() - start)
        return found, kept

    def methods(self) -> list[Int8Config]:
        """The spec's method first, then every other whose ranges differ, at most half the trials;
        asymmetric before symmetric where the recipe's runtimes take it (never for TensorRT)."""
        cal = self.job.model.calibration
        assert cal is not None
        first = method_name(cal)
        available = list(self.calibrated.candidates) or [(first, True)]
        # Asymmetric first where it is allowed: UINT8 over [0, max] halves a ReLU's step, and
        # ONNX Runtime's x86 kernels take UINT8 activations natively (as fast as any).
        ordered = sorted(available, key=lambda c: (c[0] != first, _order(c[0]), c[1]))
        configs = [Int8Config(m, s) for m, s in ordered if s or not self.recipe.for_tensorrt]
        return configs[: max(1, cal.search.max_trials // 2)]  # the other half keeps nodes in float

    def trial(self, config: Int8Config) -> Outcome:
        path = self.tmp / f"trial-{len(self.graphs)}.onnx"
        try:
            quantize_config(self.job.model, self.calibrated, path, self.recipe, config)
            self.graphs[config] = path
            self.last_cosines = None
            outcome = self.judge_graph(path, subset_first=bool(config.float_nodes))
            if self.last_cosines is not None:
                self.cosines[config] = self.last_cosines
            return outcome
        finally:
            if self.bar is not None:
                self.bar.advance(1)

    def judge_graph(self, path: Path, *, subset_first: bool) -> Outcome:
        """The worst verdict over the runtimes the INT8 variants run on (each as served)."""
        outcomes: list[Outcome] = []
        for runtime in _runtimes(self.job.model):
            if runtime in self.refused:
                continue
            variant = Variant(Precision.INT8, runtime)
            try:
                session = open_variant(variant, path, self.job.model, self.job.knobs)
            except ModelRefused as exc:  # this host cannot run it: the verify stage says so too
                self.refused[runtime] = str(exc)
                continue
            outcome = self.judge_session(session, runtime, subset_first=subset_first)
            outcomes.append(outcome)
            if not outcome.passed:
                break  # a graph one runtime fails is not kept: the others need not run it
        if not outcomes:
            raise ModelRefused(
                "int8: no runtime could run the INT8 graph: " + "; ".join(self.refused.values())
            )
        worst = min(outcomes, key=lambda o: (o.passed, o.margin))
        figures = {k: v for o in outcomes for k, v in o.figures.items()}  # every runtime's
        return replace(worst, figures=figures, failures=tuple(f for o in outcomes for f in o.failures))

    def judge_session(self, session: Any, runtime: str, *, subset_first: bool) -> Outcome:
        model, count = self.job.model, _count(self.inputs)
        if subset_first and self.worst is not None and len(self.worst) < count:
            rows = self.worst
            part = run_model(session, model, {k: v[rows] for k, v in self.inputs.items()})
            spliced = {k: v.copy() for k, v in self.reference.items()}
            for name, values in part.items():
                if name in spliced:
                    spliced[name][rows] = values
            # The other samples as the reference: the best they could do. Failing even so, it fails.
            boxes = decoding(model)
            judged = judge(self.reference, spliced, self.tolerance, model.outputs, self.metric, boxes)
            if not judged.passed:
                return self.outcome(judged, runtime, len(rows))
        candidate = run_model(session, model, self.inputs)
        judged = judge(self.reference, candidate, self.tolerance, model.outputs, self.metric, decoding(model))
        cosines = sample_cosines(self.reference, candidate, model.outputs)
        if self.worst is None:  # the first trial's worst samples, until the search keeps a method
            self.worst = self.worst_of(cosines)
        elif subset_first and not judged.passed:  # passed on the worst, failed on the others
            self.worst = np.union1d(self.worst, self.worst_of(cosines))
        self.last_cosines = cosines
        return self.outcome(judged, runtime, count)

    def worst_of(self, cosines: NDArray[Any]) -> NDArray[Any]:
        share = max(WORST_AT_LEAST, -(-len(cosines) // WORST_SHARE))
        return np.sort(np.argsort(cosines, kind="stable")[:share])

    def outcome(self, judged: Judgement, runtime: str, samples: int) -> Outcome:
        figures: dict[str, float] = {}
        for name, m in judged.metrics.items():
            for what in ("min_cosine", "mean_cosine", "top1", "topk", "max_abs"):
                value = getattr(m, what)
                if value is not None and np.isfinite(value):
                    figures[f"{runtime} {name} {what}"] = round(float(value), 6)
        figures |= {f"{runtime} {k}": round(v, 6) for k, v in judged.model_metrics.items() if np.isfinite(v)}
        failures = tuple(f"{runtime}: {f}" for f in judged.failures)
        return Outcome(judged.passed, margin(judged, self.tolerance), figures, failures, samples)

    def rank(self, base: Int8Config) -> list[Ranked]:
        graph = self.graphs.get(base)
        if graph is None:
            graph = quantize_config(
                self.job.model, self.calibrated, self.tmp / "base.onnx", self.recipe, base
            )
        if base in self.cosines:  # from here on, the kept method's worst samples are judged first
            self.worst = self.worst_of(self.cosines[base])
        rows = self.worst if self.worst is not None else np.arange(_count(self.inputs))
        samples = {k: v[rows] for k, v in self.inputs.items()}
        unranked = TENSORRT_FUSED if self.recipe.for_tensorrt else frozenset()
        return rank_nodes(
            self.calibrated.graph, graph, samples, self.job.model.max_batch_size,
            skip=frozenset(self.calibrated.exclude), unranked_ops=unranked,
        )  # fmt: skip

    def speed(self, result: SearchResult) -> dict[str, dict[str, float]]:
        """In-process ms per sample on each runtime, as served: FP32, all-INT8 (the method kept),
        and the graph kept."""
        chosen, base = result.chosen, result.base
        assert chosen is not None and base is not None
        model, knobs = self.job.model, self.job.knobs
        fp32 = self.job.graph(CHECK.name)
        graphs = {"fp32": fp32, "all_int8": self.graphs.get(base), "chosen": self.graphs.get(chosen)}
        out: dict[str, dict[str, float]] = {}
        for runtime in _runtimes(model):
            if runtime in self.refused:
                continue
            times: dict[str, float] = {}
            for what, graph in graphs.items():
                if graph is None or (what == "all_int8" and chosen == base):
                    continue
                precision = Precision.FP32 if what == "fp32" else Precision.INT8
                try:
                    ms = timed(model, graph, self.inputs, variant=Variant(precision, runtime), knobs=knobs)
                except ModelRefused:
                    continue
                times[what] = round(ms, 3)
            out[runtime] = times
        return out

    def record(
        self, result: SearchResult, speed: dict[str, dict[str, float]], seconds: float
    ) -> dict[str, Any]:
        """What the manifest keeps of the search, and its line in the build's log."""
        chosen = result.chosen
        scores = {r.name: r for r in result.ranking}
        kept = [scores.get(n, Ranked(n, "?", float("nan"))) for n in (chosen.float_nodes if chosen else ())]
        found: dict[str, Any] = {
            "verified": chosen is not None,
            "method": chosen.method if chosen else None,
            "symmetric": chosen.symmetric if chosen else None,
            "float_nodes": [{"name": r.name, "op_type": r.op_type, "score": _round(r.score)} for r in kept],
            "exclude_nodes": [*self.calibrated.exclude, *(r.name for r in kept)],
            "trials": [t.to_json() for t in result.trials],
            "budget_exhausted": result.exhausted,
            "seconds": round(seconds, 2),
            "speed_ms": speed,
        }
        if self.calibrated.same_as:
            found["same_ranges"] = [list(pair) for pair in self.calibrated.same_as]
        if self.refused:
            found["not_judged_on"] = dict(self.refused)
        found["line"] = _line(result, kept, speed, seconds, len(self.calibrated.exclude))
        return found


def _line(
    result: SearchResult,
    kept: list[Ranked],
    speed: dict[str, dict[str, float]],
    seconds: float,
    excluded: int,
) -> str:
    """``search: percentile 99.99 asymmetric, 2 nodes in float (...) after 7 trials in 24 s; ...``."""
    count = f"{len(result.trials)} trial{'s' if len(result.trials) != 1 else ''} in {seconds:.0f} s"
    chosen = result.chosen
    if chosen is None:
        best = result.best()
        closest = f" (closest: {best.config.label})" if best is not None else ""
        why = "the budget ran out" if result.exhausted else "no configuration tried verified"
        return f"search: none verified after {count}, {why}{closest}"
    text = f"search: {chosen.method} {'symmetric' if chosen.symmetric else 'asymmetric'}"
    if kept:
        nodes = ", ".join(f"{r.name} {r.op_type} {_round(r.score)}" for r in kept)
        names = ", ".join(f'"{n}"' for n in [r.name for r in kept])
        text += f", {len(kept)} node{'s' if len(kept) != 1 else ''} in float ({nodes})"
    else:
        text += ", every node quantized"
    text += f" after {count}"
    for runtime, times in speed.items():
        fp32, now, full = times.get("fp32"), times.get("chosen"), times.get("all_int8")
        if fp32 and now:
            text += f"; {runtime} {now:.2f} ms a sample, {fp32 / now:.2f}x fp32"
            text += f", {full / now:.2f}x all-INT8" if full else ""
    if kept:
        more = " (beside the spec's own)" if excluded else ""
        text += f"; calibration.exclude_nodes{more}: [{names}]"
    return text


def _order(method: str) -> int:
    return SEARCHED_METHODS.index(method) if method in SEARCHED_METHODS else -1


def _count(samples: dict[str, NDArray[Any]]) -> int:
    return int(next(iter(samples.values())).shape[0])


def _round(score: float) -> float:
    return float(f"{score:.3g}") if np.isfinite(score) else float("nan")


INT8 = Int8()
