"""The build: spec → per-model stages → engines → a repository, published atomically.

This module conducts: which stages each model runs and in which order (``MODEL_STAGES``, then
``GRAPH_STAGES`` per precision, then a verification per variant), and what their failures mean.
Each stage is a module of ``builder/stages/`` holding its inputs, its body and the code its key
covers (``builder/stages/base.py``), run through the stage cache: a stage whose inputs did not
change is skipped, so a rebuild with nothing changed does no work at all. The target decides
what the repository holds; the repository writer only writes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

from builder import repository
from builder.cache import StageCache, StageResult, cache_root
from builder.engines.build import EngineInput, build_all
from builder.engines.detect import detect
from builder.errors import ModelRefused, SpecError, UserError, VerificationError
from builder.failures import reason
from builder.llm.build import build_llm, check_llm_paths
from builder.records import (
    BuildContext,
    BuildOptions,
    BuildResult,
    EngineSummary,
    LeftOut,
    ModelBuild,
    VerificationReport,
)
from builder.sources import source_of
from builder.spec import ONNXRUNTIME, ModelSpec, Precision, Spec, Variant, load_spec
from builder.stages.base import GRAPH, ModelJob, Stage, run_stage
from builder.stages.check import CHECK
from builder.stages.export import EXPORT
from builder.stages.fp16 import FP16
from builder.stages.int8 import INT8
from builder.stages.int8 import TABLE as CALIBRATION_TABLE
from builder.stages.int8_dynamic import INT8_DYNAMIC
from builder.stages.int8_ranges import INT8_RANGES
from builder.stages.reference import REFERENCE
from builder.stages.size import Size
from builder.stages.verify import Verify
from builder.targets import TARGETS, Target, resolve
from builder.targets.base import unknown_targets


class _Entry(Protocol):
    @property
    def name(self) -> str: ...


Named = TypeVar("Named", bound=_Entry)
Made = TypeVar("Made")


def build(opts: BuildOptions) -> BuildResult:
    """Run every stage for every model, the engine stage where the target builds engines,
    then publish the repository.

    A model that cannot be built for a reason of its own (a graph a library refuses, no variant
    within tolerance) is left out, saying why in one line, and the others are published; with
    none left, its error is raised and nothing is written. A defect of the builder fails the
    whole build (:class:`~builder.errors.StageDefect`)."""
    start = time.perf_counter()
    spec = load_spec(opts.spec_file)
    target = resolve(opts.target, lambda: detect().available)
    ctx = BuildContext(spec, opts.spec_file, opts.spec_file.parent, _cache(opts), opts.log)
    _check_before_stages(ctx)
    builds, left_out = _each(
        spec.models, lambda model: _served(build_model(model, ctx, target), target, ctx), ctx
    )
    llms, llms_left_out = _each(spec.llms, lambda llm: build_llm(llm, ctx), ctx)
    left_out += llms_left_out
    if not builds and not llms:
        raise left_out[0].error
    ctx = replace(ctx, spec=without(spec, {gone.name for gone in left_out}))
    engines = build_engines(builds, ctx, opts, target) if target.builds_engines else None
    contents = repository.Repository(builds, ctx, target, engines, llms)
    published = repository.write_and_publish(contents, opts.repo)
    seconds = time.perf_counter() - start
    return BuildResult(target.name, opts.repo, builds, published, seconds, engines, llms, left_out)


def _each(
    entries: Sequence[Named], make: Callable[[Named], Made], ctx: BuildContext
) -> tuple[list[Made], list[LeftOut]]:
    """``make`` of every entry; an entry that fails on the user's input is left out, saying why."""
    made: list[Made] = []
    left_out: list[LeftOut] = []
    for entry in entries:
        try:
            made.append(make(entry))
        except UserError as exc:
            ctx.log(f"[{entry.name}] left out: {exc.message}")
            left_out.append(LeftOut(entry.name, exc))
    return made, left_out


def _served(b: ModelBuild, target: Target, ctx: BuildContext) -> ModelBuild:
    for variant, why in target.refusals(b).items():  # verified, but the target cannot serve it right
        ctx.log(f"[{b.spec.name}] variant {variant.name} not published: {why}")
    b.served = target.choose_served(b, ctx.spec_file)
    if b.served in b.sizings:
        point = b.sizings[b.served].chosen
        ctx.log(f"[{b.spec.name}] serves {b.served.name} at {point.sizing.label}: {point.c1_ms:.2f} ms "
                f"a lone request, {point.c8_rows_per_s:.0f} rows/s at concurrency 8")  # fmt: skip
    return b


def without(spec: Spec, gone: set[str]) -> Spec:
    """The spec less the models in ``gone``, the ensembles that use any of them, and the Python
    models only those ensembles used."""
    if not gone:
        return spec
    ensembles = list(spec.ensembles)
    while dropped := [e for e in ensembles if {s.model for s in e.steps} & gone]:
        gone |= {e.name for e in dropped}
        ensembles = [e for e in ensembles if e.name not in gone]
    kept_steps = {s.model for e in ensembles for s in e.steps}
    orphans = {s.model for e in spec.ensembles if e.name in gone for s in e.steps} - kept_steps
    return spec.model_copy(
        update={
            "models": [m for m in spec.models if m.name not in gone],
            "llms": [m for m in spec.llms if m.name not in gone],
            "ensembles": ensembles,
            "python_models": [m for m in spec.python_models if m.name not in orphans],
        }
    )


def _cache(opts: BuildOptions) -> StageCache:
    return StageCache(cache_root(opts.spec_file, opts.cache_dir), opts.log)


def _check_before_stages(ctx: BuildContext) -> None:
    """Fail on a spec some target refuses, or on missing files, before any slow stage runs."""
    repository.check_references(ctx.spec, ctx.spec_file)
    for model in ctx.spec.models:
        unknown_targets(model, list(TARGETS), ctx.spec_file)
        for target in TARGETS.values():
            target.check(model, ctx.spec_file)
        _check_paths(model, ctx)
    for pm in ctx.spec.python_models:
        unknown_targets(pm, list(TARGETS), ctx.spec_file)
        for target in TARGETS.values():
            target.options(pm, ctx.spec_file)
    for llm in ctx.spec.llms:
        check_llm_paths(llm, ctx)


# The stages every core model runs first, in order: its graph, checked, and the truth its variants
# are held to. A refusal of the model there is the user's (one line, exit status 2).
MODEL_STAGES: tuple[Stage, ...] = (EXPORT, CHECK, REFERENCE)
# The stages that make each precision's graph, in order, the last one writing it (none: the
# checked FP32 graph itself; bf16 runs the FP32 graph). A refusal there drops the precision.
GRAPH_STAGES: dict[Precision, tuple[Stage, ...]] = {
    Precision.FP16: (FP16,),
    Precision.INT8: (INT8_RANGES, INT8),
    Precision.INT8_DYNAMIC: (INT8_DYNAMIC,),
}


def build_model(model: ModelSpec, ctx: BuildContext, target: Target) -> ModelBuild:
    out = ModelBuild(model)
    job = ModelJob(model, ctx, source_of(model), target.knobs(model), tensorrt=target.builds_engines)
    out.stages += [_run_user(job, stage) for stage in MODEL_STAGES]
    out.reference_dir = job.result(REFERENCE.name).out
    _variants(job, out)
    for variant, path in list(out.variants.items()):
        verify = Verify(variant, path)
        try:
            result = run_stage(job, verify)
        except ModelRefused as exc:  # a runtime refusing the variant's file, or failing to run it
            del out.variants[variant]
            out.reports[variant] = _dropped(variant, verify.name, exc)
            continue
        out.stages.append(result)
        out.reports[variant] = Verify.report(result.info)
    _report_failures(out, ctx)
    if target.sizes and model.sequence is None:
        _size(job, out, target)
    return out


def _size(job: ModelJob, out: ModelBuild, target: Target) -> None:
    """The race's finalists sized on this host (``size-<variant>``); one the host cannot size is
    served at the spec's sizing, saying why."""
    log, name = job.ctx.log, job.model.name
    for variant in target.finalists(out):
        sizings, allowed = target.sizings(job.model, variant)
        alone = not out.reports[variant].batch_invariant
        try:
            result = run_stage(job, Size(variant, out.variants[variant], sizings, allowed, alone=alone))
        except ModelRefused as exc:
            log(f"[{name}] {variant.name} not sized: {reason(exc)}")
            continue
        out.stages.append(result)
        out.sizings[variant] = Size.report(variant, result.info)
        note = out.sizings[variant].pinned_note()
        if note:
            log(f"[{name}] {note}")


def _run_user(job: ModelJob, stage: Stage) -> StageResult:
    """A stage reading the user's model: a refusal of it ends as one line naming the model, the
    stage and the log that keeps its traceback (exit status 2)."""
    try:
        return run_stage(job, stage)
    except ModelRefused as exc:
        raise SpecError(
            f"{stage.name} stage failed: {reason(exc)}",
            file=job.ctx.spec_file,
            model=job.model.name,
            field="source",
        ) from exc


def _dropped(variant: Variant, stage: str, exc: ModelRefused) -> VerificationReport:
    """A variant that could not be made or run: reported like one out of tolerance."""
    return VerificationReport(variant, False, {}, [f"{stage} stage failed: {reason(exc)}"])


def _variants(job: ModelJob, out: ModelBuild) -> None:
    """Each precision's graph, then every variant (a precision on a runtime) whose graph was made."""
    graphs = _graphs(job, out)
    for variant in job.model.variants():
        graph = graphs.get(variant.precision.graph)
        if graph is not None:
            out.variants[variant] = graph


def _graphs(job: ModelJob, out: ModelBuild) -> dict[Precision, Path]:
    """The ONNX graph of each precision; a precision that cannot be made is reported on each of its
    variants. A graph that is already quantized is not quantized or halved again: it is served as
    it comes (its own precision), as the fp32 variant."""
    model = job.model
    graphs: dict[Precision, Path] = {}
    quantized = _already_quantized(job.result(CHECK.name))
    for precision in dict.fromkeys(p.graph for p in model.precisions):
        if quantized and precision is not Precision.FP32:
            _refuse(model, precision, out, ModelRefused(f"the graph is already quantized ({quantized})"))
            continue
        try:
            made = [run_stage(job, stage) for stage in GRAPH_STAGES.get(precision, ())]
        except ModelRefused as exc:  # onnxruntime.quantization and ORT refuse some graphs
            _refuse(model, precision, out, exc)
            continue
        if not made:
            graphs[precision] = job.graph(CHECK.name)
            continue
        out.stages += made
        last = made[-1]
        for said in (last.info.get("note"), _search_line(last)):
            if said:
                job.ctx.log(f"[{model.name}] variant {precision.value}: {said}")
        graphs[precision] = last.out / GRAPH
        if (last.out / CALIBRATION_TABLE).is_file():
            out.calibration_table = last.out / CALIBRATION_TABLE
    return graphs


def _search_line(result: StageResult) -> str:
    """What the INT8 search kept, in one line (docs/quantization.md), or ``""``."""
    found = result.info.get("search")
    return str(found.get("line", "")) if isinstance(found, dict) else ""


def _refuse(model: ModelSpec, precision: Precision, out: ModelBuild, exc: ModelRefused) -> None:
    for variant in model.variants():
        if variant.precision.graph is precision:
            out.reports[variant] = _dropped(variant, precision.value, exc)


def _already_quantized(check: StageResult) -> str:
    """What makes the checked graph quantized already (``12 QuantizeLinear``), or ``""``: the
    check stage counted it, so a rebuild with nothing changed reads no graph."""
    ops = check.info.get("quantized")
    return ", ".join(f"{n} {op}" for op, n in ops.items()) if isinstance(ops, dict) else ""


# The engine stage: TensorRT plans for every model, where the target builds engines.


def build_engines(
    builds: list[ModelBuild], ctx: BuildContext, opts: BuildOptions, target: Target
) -> EngineSummary:
    inputs = [
        EngineInput(
            b.spec,
            b.graphs(),
            _onnxruntime(b.passed),
            _served_precision(b),
            b.calibration_table,
            b.reference_dir,
            target.options(b.spec).precision,
        )
        for b in builds
        if b.reference_dir is not None
    ]
    # Plans other GPUs built for cc_model_filenames stay: the published repository holds them.
    previous = opts.repo if opts.repo.is_dir() else None
    engines = build_all(
        inputs, ctx.cache.root, ctx.log, require=opts.require_engines, previous_repository=previous
    )
    return engines.summary()


def _onnxruntime(variants: list[Variant]) -> list[Precision]:
    """The precisions verified on ONNX Runtime: the graphs TensorRT plans are checked against."""
    return [v.precision for v in variants if v.runtime == ONNXRUNTIME]


def _served_precision(b: ModelBuild) -> Precision | None:
    """The served variant's precision, where its graph is one a TensorRT plan can start from."""
    graph = b.served.precision.graph if b.served is not None else None
    return graph if graph in b.graphs() else None


def _report_failures(b: ModelBuild, ctx: BuildContext) -> None:
    for variant, report in b.reports.items():
        if not report.passed:
            ctx.log(f"[{b.spec.name}] variant {variant.name} not published: {'; '.join(report.failures)}")
    if not b.passed:
        first = next(iter(b.reports.values()))
        raise VerificationError(
            f"no variant met its tolerance; {first.failures[0]}",
            file=ctx.spec_file,
            model=b.spec.name,
            field="tolerances",
        )


def _check_paths(model: ModelSpec, ctx: BuildContext) -> None:
    source_of(model).check_paths(model, ctx.spec_dir, ctx.spec_file)
    for section, data in (("evaluation", model.evaluation), ("calibration", model.calibration)):
        if data is not None and data.data is not None and not (ctx.spec_dir / data.data).exists():
            raise SpecError(
                f"'{data.data}' not found", file=ctx.spec_file, model=model.name, field=f"{section}.data"
            )
