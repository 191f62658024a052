"""The build: spec → per-model stages → a repository, published atomically.

Each stage is a plain function from the spec and earlier artifacts to files on
disk, run through the stage cache: a stage whose inputs did not change is
skipped, so a rebuild with nothing changed does no work at all.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder import __version__
from builder.cache import StageCache, StageResult, file_hash, key_of, tree_hash
from builder.errors import SpecError, VerificationError
from builder.spec import DataSpec, ModelSpec, Precision, Smoothing, Spec, load_spec

STAGE_VERSION = 1  # bump when a stage's output format changes


@dataclass
class BuildOptions:
    spec_file: Path
    repo: Path
    target: str = "auto"
    cache_dir: Path | None = None
    require_engines: bool = False
    log: Callable[[str], None] = print


@dataclass
class ModelBuild:
    """What the stages produced for one core model."""

    spec: ModelSpec
    variants: dict[Precision, Path] = field(default_factory=dict)
    reports: dict[Precision, dict[str, Any]] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    calibration_table: Path | None = None
    served: Precision | None = None

    @property
    def passed(self) -> list[Precision]:
        return [p for p in self.variants if self.reports[p]["passed"]]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages if not s.skipped)


@dataclass
class BuildContext:
    spec: Spec
    spec_file: Path
    spec_dir: Path
    target: str
    cache: StageCache
    log: Callable[[str], None]


def resolve_target(target: str) -> str:
    if target != "auto":
        return target
    from builder.engines.detect import detect

    return "gpu" if detect().available else "local"


def build(opts: BuildOptions) -> BuildResult:
    """Run every stage for every model, then publish the repository."""
    from builder import repository  # imports the config writer only when building

    start = time.perf_counter()
    spec_file = opts.spec_file  # as the user wrote it: error messages name it so
    spec = load_spec(spec_file)
    spec_dir = spec_file.parent
    target = resolve_target(opts.target)
    cache_dir = opts.cache_dir or spec_dir / ".tritonforge" / "cache"
    ctx = BuildContext(spec, spec_file, spec_dir, target, StageCache(cache_dir, opts.log), opts.log)
    repository.check_references(spec, spec_file)
    for model in spec.models:
        _check_paths(model, ctx)
    builds = [build_model(model, ctx) for model in spec.models]
    for b in builds:
        b.served = choose_served(b, target, spec_file)
    engines = repository.engine_step(builds, ctx, opts.require_engines)
    published = repository.write_and_publish(builds, ctx, opts.repo, engines)
    return BuildResult(target, opts.repo, builds, published, time.perf_counter() - start, engines)


@dataclass
class BuildResult:
    target: str
    repo: Path
    models: list[ModelBuild]
    published: bool
    seconds: float
    engines: Any = None


def build_model(model: ModelSpec, ctx: BuildContext) -> ModelBuild:
    out = ModelBuild(model)
    source_fp = source_fingerprint(model, ctx)
    export = ctx.cache.run(
        model.name,
        "export",
        key_of("export", STAGE_VERSION, __version__, model.model_dump(include=_EXPORT_FIELDS), source_fp),
        lambda d: _export(model, ctx, d),
    )
    check = ctx.cache.run(
        model.name,
        "check",
        key_of("check", STAGE_VERSION, export.info["sha256"], model.model_dump(include=_CHECK_FIELDS)),
        lambda d: _check(model, ctx, export.out / "model.onnx", d),
    )
    reference = ctx.cache.run(
        model.name,
        "reference",
        key_of("reference", STAGE_VERSION, export.key, source_fp, data_fingerprint(model.evaluation, ctx)),
        lambda d: _reference(model, ctx, export.out / "model.onnx", d),
    )
    out.stages += [export, check, reference]
    fp32 = check.out / "model.onnx"
    for precision in model.precisions:
        variant = _variant(model, precision, fp32, check, ctx)
        if variant is not None:
            out.stages.append(variant)
            out.variants[precision] = variant.out / "model.onnx"
            if precision is Precision.INT8 and (variant.out / "calibration.cache").is_file():
                out.calibration_table = variant.out / "calibration.cache"
        else:
            out.variants[precision] = fp32
    for precision, path in out.variants.items():
        verify = ctx.cache.run(
            model.name,
            f"verify-{precision.value}",
            key_of(
                "verify",
                STAGE_VERSION,
                file_hash(path),
                reference.key,
                model.tolerances[precision].model_dump(),
                model.opt_batch(),
            ),
            lambda d, p=precision, f=path: _verify(model, p, f, reference.out, d),
        )
        out.stages.append(verify)
        out.reports[precision] = verify.info
    _report_failures(out, ctx)
    return out


_EXPORT_FIELDS = {"source", "inputs", "outputs", "max_batch_size", "profiles", "opset"}
_CHECK_FIELDS = {"inputs", "outputs", "max_batch_size", "simplify", "profiles"}


def _variant(
    model: ModelSpec, precision: Precision, fp32: Path, check: StageResult, ctx: BuildContext
) -> StageResult | None:
    base = (STAGE_VERSION, check.info["sha256"])
    if precision is Precision.FP16:
        return ctx.cache.run(model.name, "fp16", key_of("fp16", *base), lambda d: _fp16(fp32, d))
    if precision is Precision.INT8:
        assert model.calibration is not None  # the spec requires it for int8
        from builder.stages.quantize import int8_recipe

        recipe = int8_recipe(ctx.target, model).key()
        key = key_of(
            "int8", *base, model.calibration.model_dump(), data_fingerprint(model.calibration, ctx), *recipe
        )
        return ctx.cache.run(model.name, "int8", key, lambda d: _int8(model, ctx, fp32, d))
    if precision is Precision.INT8_DYNAMIC:
        smooth = model.int8_dynamic.smooth
        data = data_fingerprint(model.calibration, ctx) if smooth and model.calibration else None
        key = key_of("int8_dynamic", *base, model.int8_dynamic.model_dump(), data)
        return ctx.cache.run(model.name, "int8_dynamic", key, lambda d: _int8_dynamic(model, ctx, fp32, d))
    return None


# Stage bodies: each writes into its folder and returns what the manifest records.


def _export(model: ModelSpec, ctx: BuildContext, out: Path) -> dict[str, Any]:
    from builder.stages.export import export

    path = export(model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, out=out / "model.onnx")
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _check(model: ModelSpec, ctx: BuildContext, onnx_in: Path, out: Path) -> dict[str, Any]:
    from builder.stages.check import check

    path = check(model, onnx_in, out / "model.onnx", spec_file=ctx.spec_file)
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _reference(model: ModelSpec, ctx: BuildContext, exported: Path, out: Path) -> dict[str, Any]:
    """Evaluation inputs and the source model's outputs on them (the verification truth)."""
    from builder.data import load_samples
    from builder.stages.export import load_source, torch_reference
    from builder.stages.verify import run_onnx

    inputs = load_samples(
        model.evaluation, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="evaluation"
    )
    reference = None
    source_kind = "onnx"
    if model.source_kind == "factory":
        source = load_source(model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file)
        reference = torch_reference(model, source, inputs)
        source_kind = "pytorch" if reference is not None else "onnx"
    if reference is None:
        reference = run_onnx(exported, inputs, batch_size=model.max_batch_size)
    np.savez(out / "inputs.npz", **inputs)
    np.savez(out / "reference.npz", **reference)
    samples = len(next(iter(inputs.values())))
    return {"samples": samples, "against": source_kind}


def _fp16(fp32: Path, out: Path) -> dict[str, Any]:
    from builder.stages.fp16 import convert_fp16

    path = convert_fp16(fp32, out / "model.onnx")
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _int8(model: ModelSpec, ctx: BuildContext, fp32: Path, out: Path) -> dict[str, Any]:
    from builder.stages.quantize import int8_recipe, quantize_int8

    assert model.calibration is not None
    samples = _calibration_samples(model, ctx)
    source = _smoothed(fp32, model.calibration.smooth, samples, out)
    result = quantize_int8(model, source, samples, out, int8_recipe(ctx.target, model), tensorrt_graph=fp32)
    _settle(result.onnx, out / "model.onnx")
    if result.calibration_table is not None:
        _settle(result.calibration_table, out / "calibration.cache")
    (out / "smoothed.onnx").unlink(missing_ok=True)
    path = out / "model.onnx"
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _int8_dynamic(model: ModelSpec, ctx: BuildContext, fp32: Path, out: Path) -> dict[str, Any]:
    from builder.stages.quantize import quantize_int8_dynamic

    source = fp32
    if model.int8_dynamic.smooth is not None:
        source = _smoothed(fp32, model.int8_dynamic.smooth, _calibration_samples(model, ctx), out)
    _settle(quantize_int8_dynamic(model, source, out), out / "model.onnx")
    (out / "smoothed.onnx").unlink(missing_ok=True)
    path = out / "model.onnx"
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def _calibration_samples(model: ModelSpec, ctx: BuildContext) -> dict[str, np.ndarray]:
    from builder.data import load_samples

    assert model.calibration is not None
    return load_samples(
        model.calibration, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="calibration"
    )


def _smoothed(fp32: Path, smooth: Smoothing | None, samples: dict[str, np.ndarray], out: Path) -> Path:
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


def _verify(model: ModelSpec, precision: Precision, path: Path, ref_dir: Path, out: Path) -> dict[str, Any]:
    from builder.stages.verify import time_variant, verify_variant

    inputs = dict(np.load(ref_dir / "inputs.npz", allow_pickle=False))
    reference = dict(np.load(ref_dir / "reference.npz", allow_pickle=False))
    report = verify_variant(model, precision, path, inputs, reference)
    if report.passed:
        report.ms_per_sample = time_variant(model, path, inputs)
    return report.to_json()


def _settle(produced: Path, wanted: Path) -> None:
    if produced.resolve() != wanted.resolve():
        shutil.move(produced, wanted)


# Choosing what to serve, and saying why variants were dropped.


def _report_failures(b: ModelBuild, ctx: BuildContext) -> None:
    for precision, report in b.reports.items():
        if not report["passed"]:
            ctx.log(
                f"[{b.spec.name}] variant {precision.value} not published: {'; '.join(report['failures'])}"
            )
    if not b.passed:
        first = next(iter(b.reports.values()))
        raise VerificationError(
            f"no variant met its tolerance; {first['failures'][0]}",
            file=ctx.spec_file,
            model=b.spec.name,
            field="tolerances",
        )


GPU_PREFERENCE = (Precision.INT8, Precision.FP16, Precision.FP32)


def choose_served(b: ModelBuild, target: str, spec_file: Path) -> Precision:
    """The variant the spec names for the target, else the fastest that passed."""
    wanted = getattr(b.spec.serve, target)
    passed = b.passed
    if wanted is not None:
        if wanted not in passed:
            raise VerificationError(
                f"the variant named for target '{target}' did not pass verification: "
                f"{'; '.join(b.reports[wanted]['failures'])}",
                file=spec_file,
                model=b.spec.name,
                field=f"serve.{target}",
            )
        return wanted
    if target == "gpu":
        for precision in GPU_PREFERENCE:
            if precision in passed:
                return precision
        raise VerificationError(
            "no TensorRT-compatible variant (int8, fp16, fp32) passed verification",
            file=spec_file,
            model=b.spec.name,
            field="precisions",
        )
    timed = [p for p in passed if b.reports[p].get("ms_per_sample") is not None]
    return min(timed or passed, key=lambda p: b.reports[p].get("ms_per_sample") or 0.0)


# Fingerprints: what a stage's key must change with.


def source_fingerprint(model: ModelSpec, ctx: BuildContext) -> str:
    if model.source_kind == "onnx":
        path = ctx.spec_dir / model.source
        return file_hash(path)
    return module_fingerprint(model.source, ctx.spec_dir)


def module_fingerprint(ref: str, spec_dir: Path) -> str:
    """Hash of the source file defining ``pkg.mod:fn`` (without importing it)."""
    module = ref.partition(":")[0]
    root = str(spec_dir.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not Path(found.origin).is_file():
        return f"unresolved:{module}"
    return file_hash(Path(found.origin))


def data_fingerprint(data: DataSpec, ctx: BuildContext) -> str:
    parts: list[str] = []
    if data.data is not None:
        path = ctx.spec_dir / data.data
        parts.append(tree_hash(path) if path.exists() else "missing")
    if data.reader is not None:
        parts.append(module_fingerprint(data.reader, ctx.spec_dir))
    return key_of(parts, data.max_samples)


def _check_paths(model: ModelSpec, ctx: BuildContext) -> None:
    """Fail on missing files before any slow stage runs."""
    if model.source_kind == "onnx" and not (ctx.spec_dir / model.source).is_file():
        raise SpecError(
            f"ONNX file '{model.source}' not found", file=ctx.spec_file, model=model.name, field="source"
        )
    for section, data in (("evaluation", model.evaluation), ("calibration", model.calibration)):
        if data is not None and data.data is not None and not (ctx.spec_dir / data.data).exists():
            raise SpecError(
                f"'{data.data}' not found", file=ctx.spec_file, model=model.name, field=f"{section}.data"
            )
