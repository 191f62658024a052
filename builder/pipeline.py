"""The build: spec → per-model stages → engines → a repository, published atomically.

Each stage is a plain function from the spec and earlier artifacts to files on
disk, run through the stage cache under the key of its declared inputs
(``builder.stages.inputs``): a stage whose inputs did not change is skipped, so a
rebuild with nothing changed does no work at all. The target decides what the
repository holds; the repository writer only writes it.

Stage modules import torch and ONNX Runtime, so each stage body imports its module
when it runs: a rebuild with nothing changed stays under a second.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from builder import repository
from builder.cache import StageCache, StageResult, cache_root, file_hash
from builder.engines.build import EngineInput, build_all
from builder.engines.detect import detect
from builder.errors import ModelRefused, SpecError, UserError, VerificationError
from builder.failures import guarded, reason
from builder.llm.build import build_llm, check_llm_paths
from builder.records import (
    BuildContext,
    BuildOptions,
    BuildResult,
    EngineSummary,
    LeftOut,
    ModelBuild,
    ReportJson,
    VerificationReport,
)
from builder.sources import export, source_of
from builder.spec import ModelSpec, Precision, Runtime, Smoothing, Spec, Variant, load_spec
from builder.stages.inputs import (
    CheckInputs,
    ExportInputs,
    Fp16Inputs,
    Int8DynamicInputs,
    Int8Inputs,
    Int8RangesInputs,
    Int8Recipe,
    ReferenceInputs,
    StageInputs,
    VerifyInputs,
    data_fingerprint,
    int8_recipe,
    kernel_flags,
)
from builder.targets import TARGETS, Target, resolve
from builder.targets.base import unknown_serve_targets

Info = dict[str, object]
Samples = dict[str, NDArray[Any]]


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
    engines = build_engines(builds, ctx, opts) if target.builds_engines else None
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
    b.served = target.choose_served(b, ctx.spec_file)
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
        unknown_serve_targets(model, list(TARGETS), ctx.spec_file)
        for target in TARGETS.values():
            target.check(model, ctx.spec_file)
        _check_paths(model, ctx)
    for llm in ctx.spec.llms:
        check_llm_paths(llm, ctx)


def build_model(model: ModelSpec, ctx: BuildContext, target: Target) -> ModelBuild:
    out = ModelBuild(model)
    source_fp = source_fingerprint(model, ctx)
    export = _run_user(ctx, model, ExportInputs(
        source=model.source, source_fingerprint=source_fp, inputs=model.inputs, outputs=model.outputs,
        max_batch_size=model.max_batch_size, profiles=model.profiles, opset=model.opset,
    ), lambda d: _export(model, ctx, d))  # fmt: skip
    check = _run_user(ctx, model, CheckInputs(
        exported_sha256=_sha(export), inputs=model.inputs, outputs=model.outputs,
        max_batch_size=model.max_batch_size, simplify=model.simplify, profiles=model.profiles,
        sequence=model.sequence,
    ), lambda d: _check(model, ctx, export.out / "model.onnx", d))  # fmt: skip
    reference = _run_user(ctx, model, ReferenceInputs(
        exported_sha256=_sha(export), source_fingerprint=source_fp,
        evaluation=_evaluation(model, ctx),
        sequence=model.sequence,
    ), lambda d: _reference(model, ctx, export.out / "model.onnx", d))  # fmt: skip
    out.stages += [export, check, reference]
    out.reference_dir = reference.out
    _variants(model, check, ctx, target, out)
    for variant, path in list(out.variants.items()):
        try:
            out.reports[variant] = _verified(model, variant, path, reference, ctx, out)
        except ModelRefused as exc:  # a runtime refusing the variant's file, or failing to run it
            del out.variants[variant]
            out.reports[variant] = _dropped(variant, f"verify-{variant.name}", exc)
    _report_failures(out, ctx)
    return out


def _evaluation(model: ModelSpec, ctx: BuildContext) -> str:
    """The reference's data in its key: the evaluation data, or synthetic samples at the opt shapes."""
    if model.evaluation is not None:
        return data_fingerprint(model.evaluation, ctx.spec_dir)
    return f"synthetic:{[model.shape_range(t).opt for t in model.inputs]}"


def _run_user(
    ctx: BuildContext, model: ModelSpec, inputs: StageInputs, body: Callable[[Path], Info]
) -> StageResult:
    """A stage reading the user's model: a refusal of it ends as one line naming the model, the
    stage and the log that keeps its traceback (exit status 2)."""
    try:
        return _run(ctx, model, inputs, body)
    except ModelRefused as exc:
        raise SpecError(
            f"{inputs.STAGE} stage failed: {reason(exc)}",
            file=ctx.spec_file,
            model=model.name,
            field="source",
        ) from exc


def _dropped(variant: Variant, stage: str, exc: ModelRefused) -> VerificationReport:
    """A variant that could not be made or run: reported like one out of tolerance."""
    return VerificationReport(variant, False, {}, [f"{stage} stage failed: {reason(exc)}"])


def _run(
    ctx: BuildContext, model: ModelSpec, inputs: StageInputs, body: Callable[[Path], Info], stage: str = ""
) -> StageResult:
    stage = stage or inputs.STAGE
    log = ctx.cache.root / model.name / f"{stage}.failure.log"
    return ctx.cache.run(
        model.name,
        stage,
        inputs.key(),
        guarded(body, model=model.name, stage=stage, user_code=ctx.spec_dir, log=log),
    )


def _sha(stage: StageResult) -> str:
    return str(stage.info["sha256"])


def _variants(
    model: ModelSpec, check: StageResult, ctx: BuildContext, target: Target, out: ModelBuild
) -> None:
    """Each precision's graph, then every variant (a precision on a runtime) whose graph was made."""
    graphs = _graphs(model, check, ctx, target, out)
    for variant in model.variants():
        graph = graphs.get(variant.precision.graph)
        if graph is not None:
            out.variants[variant] = graph


def _graphs(
    model: ModelSpec, check: StageResult, ctx: BuildContext, target: Target, out: ModelBuild
) -> dict[Precision, Path]:
    """The ONNX graph of each precision (bf16 runs the FP32 graph); a precision that cannot be
    made is reported on each of its variants. A graph that is already quantized is not quantized
    or halved again: it is served as it comes (its own precision), as the fp32 variant."""
    fp32 = check.out / "model.onnx"
    graphs: dict[Precision, Path] = {}
    quantized = _already_quantized(check)
    for precision in dict.fromkeys(p.graph for p in model.precisions):
        if quantized and precision is not Precision.FP32:
            _refuse(model, precision, out, ModelRefused(f"the graph is already quantized ({quantized})"))
            continue
        try:
            stages = _variant(model, precision, fp32, check, ctx, target)
        except ModelRefused as exc:  # onnxruntime.quantization and ORT refuse some graphs
            _refuse(model, precision, out, exc)
            continue
        if not stages:
            graphs[precision] = fp32
            continue
        out.stages += stages
        variant = stages[-1]
        if variant.info.get("note"):
            ctx.log(f"[{model.name}] variant {precision.value}: {variant.info['note']}")
        graphs[precision] = variant.out / "model.onnx"
        if precision is Precision.INT8 and (variant.out / "calibration.cache").is_file():
            out.calibration_table = variant.out / "calibration.cache"
    return graphs


def _refuse(model: ModelSpec, precision: Precision, out: ModelBuild, exc: ModelRefused) -> None:
    for variant in model.variants():
        if variant.precision.graph is precision:
            out.reports[variant] = _dropped(variant, precision.value, exc)


def _already_quantized(check: StageResult) -> str:
    """What makes the checked graph quantized already (``12 QuantizeLinear``), or ``""``: the
    check stage counted it, so a rebuild with nothing changed reads no graph."""
    ops = check.info.get("quantized")
    return ", ".join(f"{n} {op}" for op, n in ops.items()) if isinstance(ops, dict) else ""


def _variant(
    model: ModelSpec, precision: Precision, fp32: Path, check: StageResult, ctx: BuildContext, target: Target
) -> tuple[StageResult, ...]:
    """The stages that make the precision's graph, the one that writes it last (none for fp32)."""
    checked = _sha(check)
    if precision is Precision.FP16:
        return (_run(ctx, model, Fp16Inputs(checked_sha256=checked), lambda d: _fp16(fp32, d)),)
    if precision is Precision.INT8:
        assert model.calibration is not None  # the spec requires it for int8
        ranges_in = Int8RangesInputs(
            checked_sha256=checked, calibration=model.calibration,
            data=data_fingerprint(model.calibration, ctx.spec_dir), opset=_opset_conversion(check),
        )  # fmt: skip
        ranges = _run(ctx, model, ranges_in, lambda d: _int8_ranges(model, ctx, fp32, d))
        recipe = int8_recipe(target.builds_engines, model)
        inputs = Int8Inputs(ranges_key=ranges.key, recipe=recipe.fields())
        return ranges, _run(ctx, model, inputs, lambda d: _int8(model, ctx, fp32, ranges, recipe, d))
    if precision is Precision.INT8_DYNAMIC:
        smooth = model.int8_dynamic.smooth
        data = data_fingerprint(model.calibration, ctx.spec_dir) if smooth and model.calibration else None
        dyn = Int8DynamicInputs(checked_sha256=checked, options=model.int8_dynamic, data=data)
        return (_run(ctx, model, dyn, lambda d: _int8_dynamic(model, ctx, fp32, d)),)
    return ()


def _opset_conversion(check: StageResult) -> dict[str, bool]:
    """In the int8 key where the checked graph is below opset 13 (converted, or per tensor)."""
    opset = check.info.get("opset")
    return {"below_opset_13": True} if isinstance(opset, int) and opset < 13 else {}


def _verified(
    model: ModelSpec,
    variant: Variant,
    path: Path,
    reference: StageResult,
    ctx: BuildContext,
    out: ModelBuild,
) -> VerificationReport:
    inputs = VerifyInputs(
        variant_sha256=file_hash(path), reference_key=reference.key,
        tolerance=model.tolerances[variant.precision], opt_batch=model.opt_batch(),
        threads=model.serve.threads, runtime=variant.runtime.value, precision=variant.precision.value,
        cpu=kernel_flags(),
    )  # fmt: skip
    verify = _run(ctx, model, inputs, lambda d: _verify(model, variant, path, reference.out),
                  stage=f"verify-{variant.name}")  # fmt: skip
    out.stages.append(verify)
    return VerificationReport.from_json(cast(ReportJson, verify.info))


# Stage bodies: each writes into its folder and returns what the cache records.


def _export(model: ModelSpec, ctx: BuildContext, out: Path) -> Info:
    path = export(model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, out=out / "model.onnx")
    return _artifact(path)


def _check(model: ModelSpec, ctx: BuildContext, onnx_in: Path, out: Path) -> Info:
    from builder.stages.check import check, graph_opset
    from builder.stages.quantized import quantized_ops

    checked = check(model, onnx_in, out / "model.onnx", spec_file=ctx.spec_file)
    return _artifact(checked) | {"opset": graph_opset(checked), "quantized": quantized_ops(checked)}


def _reference(model: ModelSpec, ctx: BuildContext, exported: Path, out: Path) -> Info:
    """Evaluation inputs and the source model's outputs on them (the verification truth)."""
    from builder.data import load_samples, synthetic_samples
    from builder.stages.verify import run_model, session

    if model.evaluation is None:
        inputs = synthetic_samples(model, spec_dir=ctx.spec_dir, graph=exported, log=ctx.log)
    else:
        inputs = load_samples(
            model.evaluation, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="evaluation"
        )
    reference = None
    if model.sequence is None:  # a stateful one is checked against the ONNX loop
        reference = source_of(model).reference(
            model, inputs, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, log=out / "reference.log"
        )
    against = "pytorch" if reference is not None else "onnx"
    if reference is None:
        reference = run_model(session(exported), model, inputs)
    np.savez(out / "inputs.npz", **inputs)
    np.savez(out / "reference.npz", **reference)
    samples = len(next(iter(inputs.values())))
    return {"samples": samples, "against": against}


def _fp16(fp32: Path, out: Path) -> Info:
    from builder.stages.fp16 import convert_fp16

    return _artifact(convert_fp16(fp32, out / "model.onnx"))


def _int8_ranges(model: ModelSpec, ctx: BuildContext, fp32: Path, out: Path) -> Info:
    """The (smoothed) graph ready for quantize_static and its calibration, for every recipe."""
    from builder.stages.quantize import calibrate_int8

    assert model.calibration is not None
    samples = _calibration_samples(model, ctx)
    source = _smoothed(fp32, model.calibration.smooth, samples, out)
    calibrated = calibrate_int8(model, source, samples, out)
    (out / "smoothed.onnx").unlink(missing_ok=True)
    return calibrated.to_info() | {"smoothed": source != fp32}


def _int8(
    model: ModelSpec, ctx: BuildContext, fp32: Path, ranges: StageResult, recipe: Int8Recipe, out: Path
) -> Info:
    from builder.stages.quantize import Calibrated, quantize_calibrated

    # A smoothed source is not the graph TensorRT parses (fp32): its table is calibrated apart.
    source = ranges.out / "smoothed.onnx" if ranges.info["smoothed"] else fp32
    calibrated = Calibrated.read(ranges.out, source, ranges.info)
    samples = _calibration_samples(model, ctx) if recipe.calibration_table else None
    result = quantize_calibrated(model, calibrated, out, recipe, samples=samples, tensorrt_graph=fp32)
    _settle(result.onnx, out / "model.onnx")
    if result.calibration_table is not None:
        _settle(result.calibration_table, out / "calibration.cache")
    return _artifact(out / "model.onnx") | ({"note": result.note} if result.note else {})


def _int8_dynamic(model: ModelSpec, ctx: BuildContext, fp32: Path, out: Path) -> Info:
    from builder.stages.quantize import quantize_int8_dynamic

    source = fp32
    if model.int8_dynamic.smooth is not None:
        source = _smoothed(fp32, model.int8_dynamic.smooth, _calibration_samples(model, ctx), out)
    _settle(quantize_int8_dynamic(model, source, out), out / "model.onnx")
    (out / "smoothed.onnx").unlink(missing_ok=True)
    return _artifact(out / "model.onnx")


def _calibration_samples(model: ModelSpec, ctx: BuildContext) -> Samples:
    from builder.data import load_samples

    assert model.calibration is not None
    return load_samples(
        model.calibration, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="calibration"
    )


def _smoothed(fp32: Path, smooth: Smoothing | None, samples: Samples, out: Path) -> Path:
    """The FP32 graph with MatMul-input outliers smoothed away, or ``fp32`` itself."""
    if smooth is None:
        return fp32
    from builder.stages.smoothing import smooth_matmul_inputs

    try:
        return smooth_matmul_inputs(
            fp32, out / "smoothed.onnx", samples, alpha=smooth.alpha, nodes=smooth.nodes or None
        )
    except ValueError as exc:
        raise SpecError(str(exc), field="smooth.nodes") from None


def _verify(model: ModelSpec, variant: Variant, path: Path, ref_dir: Path) -> Info:
    from builder.stages.verify import verify_variant

    inputs = dict(np.load(ref_dir / "inputs.npz", allow_pickle=False))
    reference = dict(np.load(ref_dir / "reference.npz", allow_pickle=False))
    return dict(verify_variant(model, variant, path, inputs, reference).to_json())


def _artifact(path: Path) -> Info:
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _settle(produced: Path, wanted: Path) -> None:
    if produced.resolve() != wanted.resolve():
        shutil.move(produced, wanted)


# The engine stage: TensorRT plans for every model, where the target builds engines.


def build_engines(builds: list[ModelBuild], ctx: BuildContext, opts: BuildOptions) -> EngineSummary:
    inputs = [
        EngineInput(
            b.spec,
            b.graphs(),
            _onnxruntime(b.passed),
            _served_precision(b),
            b.calibration_table,
            b.reference_dir,
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
    return [v.precision for v in variants if v.runtime is Runtime.ONNXRUNTIME]


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


# Fingerprints: what a stage's key must change with.


def source_fingerprint(model: ModelSpec, ctx: BuildContext) -> str:
    return source_of(model).fingerprint(model, ctx.spec_dir)


def _check_paths(model: ModelSpec, ctx: BuildContext) -> None:
    source_of(model).check_paths(model, ctx.spec_dir, ctx.spec_file)
    for section, data in (("evaluation", model.evaluation), ("calibration", model.calibration)):
        if data is not None and data.data is not None and not (ctx.spec_dir / data.data).exists():
            raise SpecError(
                f"'{data.data}' not found", file=ctx.spec_file, model=model.name, field=f"{section}.data"
            )
