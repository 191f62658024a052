"""Writing the Triton model repository for a target, and its manifest.

Layout (``local`` target)::

    model_repository/
      manifest.json                 what was built, from what, verified how
      resnet18/config.pbtxt         the served variant of the core model
      resnet18/1/model.onnx         ... run by the onnx_runner Python model
      resnet18/1/model.py
      resnet18_int8/...             every other variant that passed verification
      image_preprocess/1/model.py   Python-backend pre/post-processing
      resnet18_image/1/             ensembles (an empty version folder)

On ``cpu`` the core models use the ``onnxruntime_onnx`` platform; on ``gpu``
``tensorrt_plan`` plus an ONNX Runtime fallback named ``<model>_onnx``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import __version__
from builder.cache import file_hash, key_of, tree_hash
from builder.configs import core_config, ensemble_config, fallback_config, python_config, write_config
from builder.errors import SpecError
from builder.factories import import_factory
from builder.publish import clean_leftovers, publish, staging_dir
from builder.spec import FACTORY_PATTERN, Precision, PythonModelSpec, Spec

if TYPE_CHECKING:
    from builder.pipeline import BuildContext, ModelBuild

MANIFEST = "manifest.json"
PYTHON_MODELS = Path(__file__).parent / "python_models"
ONNX_RUNNER = PYTHON_MODELS / "onnx_runner" / "model.py"
TOOLS = ("onnx", "onnxruntime", "torch", "tritonclient", "numpy", "onnxconverter-common", "onnxsim")


def check_references(spec: Spec, spec_file: Path) -> None:
    """Every file the repository will copy exists (checked before any slow stage)."""
    root = spec_file.parent
    for model in spec.all_models():
        for i, out in enumerate(model.outputs):
            if out.labels and not (root / out.labels).is_file():
                raise SpecError(
                    f"labels file '{out.labels}' not found", file=spec_file, model=model.name,
                    field=f"outputs[{i}].labels",
                )  # fmt: skip
    for pm in spec.python_models:
        if not (root / pm.path / "model.py").is_file():
            raise SpecError(f"'{pm.path}/model.py' not found", file=spec_file, model=pm.name, field="path")
        for i, extra in enumerate(pm.files):
            resolve_file(extra, spec_file, pm.name, f"files[{i}]")


def resolve_file(entry: str, spec_file: Path, model: str, field: str) -> Path:
    """A ``files:`` entry: a path relative to the spec, or a factory returning a packaged file."""
    if FACTORY_PATTERN.match(entry):
        path = Path(import_factory(entry, spec_file.parent, spec_file=spec_file, model=model, field=field)())
    else:
        path = spec_file.parent / entry
    if not path.is_file():
        raise SpecError(f"'{entry}' ({path}) not found", file=spec_file, model=model, field=field)
    return path


def engine_step(builds: list[ModelBuild], ctx: BuildContext, require: bool) -> Any:
    """TensorRT plans for the gpu target, where TensorRT and a GPU exist."""
    if ctx.target != "gpu":
        return None
    from builder.engines.build import build_all

    return build_all(builds, ctx, require=require)


def write_and_publish(builds: list[ModelBuild], ctx: BuildContext, repo: Path, engines: Any) -> bool:
    """Assemble the repository beside ``repo`` and swap it in, unless nothing changed."""
    repo = repo.resolve()
    clean_leftovers(repo)
    digest = repository_key(builds, ctx, engines)
    current = repo / MANIFEST
    if current.is_file() and json.loads(current.read_text()).get("repository_key") == digest:
        ctx.log(f"publish: {repo} is up to date, skipped")
        return False
    staging = staging_dir(repo)
    if engines is not None:  # plans other GPUs built for cc_model_filenames stay in the repository
        engines.previous_repository = repo
    try:
        manifest = _assemble(builds, ctx, staging, engines)
        manifest["repository_key"] = digest
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        publish(staging, repo)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    ctx.log(f"publish: {repo} ({ctx.target} target)")
    return True


def repository_key(builds: list[ModelBuild], ctx: BuildContext, engines: Any) -> str:
    """Changes whenever anything that lands in the repository would change."""
    return key_of(
        __version__,
        ctx.target,
        ctx.spec.model_dump(mode="json"),
        [(b.spec.name, [s.key for s in b.stages], b.served, b.passed) for b in builds],
        tree_hash(PYTHON_MODELS),
        [tree_hash(ctx.spec_dir / pm.path) for pm in ctx.spec.python_models],
        [
            file_hash(resolve_file(f, ctx.spec_file, pm.name, "files"))
            for pm in ctx.spec.python_models
            for f in pm.files
        ],
        getattr(engines, "key", None),
    )


def _assemble(builds: list[ModelBuild], ctx: BuildContext, root: Path, engines: Any) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for b in builds:
        models[b.spec.name] = _write_core(b, ctx, root, engines)
    for pm in ctx.spec.python_models:
        _write_python_model(pm, ctx, root)
        models[pm.name] = {"kind": "python"}
    for ens in ctx.spec.ensembles:
        (root / ens.name / "1").mkdir(parents=True)
        write_config(ensemble_config(ens, ctx.spec), root / ens.name)
        _copy_labels(ens.outputs, ctx, root / ens.name)
        models[ens.name] = {"kind": "ensemble", "steps": [s.model for s in ens.steps]}
    return {
        "tritonforge": __version__,
        "target": ctx.target,
        "spec": str(ctx.spec_file),
        "spec_sha256": file_hash(ctx.spec_file),
        "tools": tool_versions(),
        "models": models,
    }


def _write_core(b: ModelBuild, ctx: BuildContext, root: Path, engines: Any) -> dict[str, Any]:
    model, served = b.spec, b.served
    assert served is not None
    published = {model.name: served}
    if ctx.target != "gpu":
        published.update({f"{model.name}_{p.value}": p for p in b.passed if p is not served})
    artifacts: dict[str, str] = {}
    for name, precision in published.items():
        artifacts.update(_write_variant(b, name, precision, ctx, root))
    if ctx.target == "gpu":
        artifacts.update(_write_gpu(b, ctx, root, engines))
    return {
        "kind": "onnx",
        "served": served.value,
        "published": {name: p.value for name, p in published.items()},
        "stages": {
            s.name: {"key": s.key, "skipped": s.skipped, "seconds": round(s.seconds, 3)} for s in b.stages
        },
        "verification": {p.value: r for p, r in b.reports.items()},
        "artifacts": artifacts,
    }


def _write_variant(
    b: ModelBuild, name: str, precision: Precision, ctx: BuildContext, root: Path
) -> dict[str, str]:
    if ctx.target == "gpu":
        return {}  # plans and the fallback are written by _write_gpu
    model_dir = root / name
    version = model_dir / "1"
    version.mkdir(parents=True)
    onnx_path = version / "model.onnx"
    _link(b.variants[precision], onnx_path)
    if ctx.target == "local":
        shutil.copy2(ONNX_RUNNER, version / "model.py")
    write_config(
        core_config(b.spec, ctx.target, variant=precision, name=name, threads=b.spec.serve.threads), model_dir
    )  # type: ignore[arg-type]
    _copy_labels(b.spec.outputs, ctx, model_dir)
    return {f"{name}/1/model.onnx": file_hash(onnx_path)}


def _write_gpu(b: ModelBuild, ctx: BuildContext, root: Path, engines: Any) -> dict[str, str]:
    """The TensorRT model (its plan where one was built) and the ONNX Runtime fallback."""
    model = b.spec
    assert b.served is not None
    plan_dir = root / model.name
    (plan_dir / "1").mkdir(parents=True)
    write_config(core_config(model, "gpu", variant=b.served), plan_dir)
    _copy_labels(model.outputs, ctx, plan_dir)
    artifacts: dict[str, str] = {}
    if engines is not None:
        artifacts.update(engines.install(model.name, plan_dir))
    fallback = root / f"{model.name}_onnx"
    (fallback / "1").mkdir(parents=True)
    _link(
        b.variants[Precision.FP32] if Precision.FP32 in b.passed else b.variants[b.served],
        fallback / "1" / "model.onnx",
    )
    write_config(fallback_config(model), fallback)
    _copy_labels(model.outputs, ctx, fallback)
    artifacts[f"{model.name}_onnx/1/model.onnx"] = file_hash(fallback / "1" / "model.onnx")
    return artifacts


def _write_python_model(pm: PythonModelSpec, ctx: BuildContext, root: Path) -> None:
    version = root / pm.name / "1"
    version.mkdir(parents=True)
    source = ctx.spec_dir / pm.path
    for item in source.iterdir():
        if item.is_file() and item.suffix == ".py" and item.name != "__init__.py":
            shutil.copy2(item, version / item.name)
    for i, extra in enumerate(pm.files):
        path = resolve_file(extra, ctx.spec_file, pm.name, f"files[{i}]")
        _link(path, version / path.name)
    write_config(python_config(pm, ctx.target), root / pm.name)  # type: ignore[arg-type]
    _copy_labels(pm.outputs, ctx, root / pm.name)


def _copy_labels(outputs: list[Any], ctx: BuildContext, model_dir: Path) -> None:
    for out in outputs:
        if out.labels:
            shutil.copy2(ctx.spec_dir / out.labels, model_dir / Path(out.labels).name)


def _link(src: Path, dst: Path) -> None:
    """Hard-link cache artifacts into the repository (they are immutable); copy across devices."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def tool_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for tool in TOOLS:
        try:
            versions[tool] = metadata.version(tool)
        except metadata.PackageNotFoundError:
            continue
    return versions
