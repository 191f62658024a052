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

What each core model or LLM becomes on a target is the target's answer (``Target.core_models``,
``Target.llm_models``, ``Target.python_model``); this module completes those entries with what the
spec names (labels, a Python model's code and files), adds the ensembles', writes every one with
``builder.targets.writer.write_entry`` and builds nothing.
"""

from __future__ import annotations

import json
import platform
import shutil
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path

from builder import __version__
from builder.cache import StageResult, file_hash, key_of, tree_hash
from builder.configs import ensemble_config, label_file_name
from builder.errors import SpecError
from builder.factories import import_factory
from builder.failures import environment_fault
from builder.publish import clean_leftovers, publish, staging_dir
from builder.python_models import PACKAGES, model_sources
from builder.python_models.shared.runtimes import Sizing
from builder.records import BuildContext, EngineSummary, LLMBuild, ModelBuild
from builder.spec import FACTORY_PATTERN, EnsembleSpec, PythonModelSpec, Spec, TensorSpec
from builder.stages.code import code_fingerprint
from builder.targets import ModelEntry, Target
from builder.targets.writer import write_entry

MANIFEST = "manifest.json"
TOOLS = ("onnx", "onnxruntime", "torch", "tritonclient", "numpy", "onnxconverter-common", "onnxsim")
# What writes the repository: this module, every target (the folder writer, targets/writer.py, with
# them), the config and LLM entry writers, publishing. The key holds their code and every project
# module they import.
WRITERS = (
    "builder.repository",
    "builder.targets",
    "builder.configs",
    "builder.llm.serving",
    "builder.llm.gpu",
    "builder.publish",
)
Json = dict[str, object]


@dataclass(frozen=True)
class Repository:
    """What goes into one repository: the builds, for a target, with its engines."""

    builds: list[ModelBuild]
    ctx: BuildContext
    target: Target
    engines: EngineSummary | None
    llms: list[LLMBuild]


def check_references(spec: Spec, spec_file: Path) -> None:
    """Every file the repository will copy exists (checked before any slow stage)."""
    root = spec_file.parent
    for model in spec.all_models():
        for i, out in enumerate(model.outputs):
            if out.labels:
                label_lines(out, spec_file, model.name, f"outputs[{i}].labels")
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


def label_lines(out: TensorSpec, spec_file: Path, model: str, field: str) -> list[str]:
    """An output's labels, one a class: a file's lines, or what a factory returns (a list of str)."""
    assert out.labels is not None
    if not FACTORY_PATTERN.match(out.labels):
        path = spec_file.parent / out.labels
        if not path.is_file():
            raise SpecError(f"labels file '{out.labels}' not found", file=spec_file, model=model, field=field)
        return path.read_text(encoding="utf-8").splitlines()
    labels = import_factory(out.labels, spec_file.parent, spec_file=spec_file, model=model, field=field)()
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
        raise SpecError(
            f"'{out.labels}' must return a non-empty list of str", file=spec_file, model=model, field=field
        )
    if any("\n" in x for x in labels):
        raise SpecError(
            f"'{out.labels}' returned a label with a line break", file=spec_file, model=model, field=field
        )
    return labels


def write_and_publish(repo_spec: Repository, repo: Path) -> bool:
    """Assemble the repository beside ``repo`` and swap it in, unless nothing changed."""
    repo = repo.resolve()
    clean_leftovers(repo)
    digest = repository_key(repo_spec)
    current = repo / MANIFEST
    log = repo_spec.ctx.log
    if current.is_file() and json.loads(current.read_text()).get("repository_key") == digest:
        log(f"publish: {repo} is up to date, skipped")
        return False
    staging = staging_dir(repo)
    try:
        manifest = _assemble(repo_spec, staging)
        manifest["repository_key"] = digest
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        publish(staging, repo)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)  # the repository in place stays as it was
        fault = environment_fault(exc, where=staging)  # a full disk, a permission: the host's
        if fault is not None:
            raise fault from exc
        raise
    log(f"publish: {repo} ({repo_spec.target.name} target)")
    return True


def repository_key(r: Repository) -> str:
    """Changes whenever anything that lands in the repository would change."""
    spec, ctx = r.ctx.spec, r.ctx
    return key_of(
        __version__,
        code_fingerprint(WRITERS),
        r.target.name,
        spec.model_dump(mode="json"),
        [
            (b.spec.name, [s.key for s in b.stages], str(b.served), [v.name for v in b.passed])
            for b in r.builds
        ],
        # The served dtype too: dtype auto's choice is a measurement, not a function of the keys.
        [(lb.spec.name, [s.key for s in lb.stages], lb.verdict.dtype.value) for lb in r.llms],
        tree_hash(PACKAGES),
        [tree_hash(ctx.spec_dir / pm.path) for pm in spec.python_models],
        [_labels(m.outputs, ctx, m.name) for m in spec.all_models()],
        [
            file_hash(resolve_file(f, ctx.spec_file, pm.name, "files"))
            for pm in spec.python_models
            for f in pm.files
        ],
        r.engines.key if r.engines is not None else None,
    )


def _assemble(r: Repository, root: Path) -> Json:
    models: Json = {}
    for b in r.builds:
        models[b.spec.name] = _write_core(b, r, root)
    for lb in r.llms:
        models[lb.spec.name] = _write_llm(lb, r, root)
    for pm in r.ctx.spec.python_models:
        _write_entry(_python_entry(pm, r), pm.outputs, r.ctx, root)
        models[pm.name] = {"kind": "python"}
    for ens in r.ctx.spec.ensembles:
        _write_entry(_ensemble_entry(ens, r.ctx.spec), ens.outputs, r.ctx, root)
        models[ens.name] = {"kind": "ensemble", "steps": [s.model for s in ens.steps]}
    return {
        "tritonforge": __version__,
        "target": r.target.name,
        "spec": str(r.ctx.spec_file),
        "spec_sha256": file_hash(r.ctx.spec_file),
        "tools": tool_versions(),
        "models": models,
    }


def _write_core(b: ModelBuild, r: Repository, root: Path) -> Json:
    assert b.served is not None
    entries = r.target.core_models(b, r.engines)
    artifacts: dict[str, str] = {}
    for entry in entries:
        artifacts.update(_write_entry(entry, b.spec.outputs, r.ctx, root))
    out: Json = {
        "kind": "onnx",
        "served": b.served.name,
        "published": {e.name: e.variant.name for e in entries if e.variant is not None},
        "stages": _stages(b.stages),
        "verification": {v.name: report.to_json() for v, report in b.reports.items()},
        # The race's finalists as sized here, and the sizing the served variant runs at.
        "sizing": {v.name: report.to_json() for v, report in b.sizings.items()},
        "served_at": sizing_json(r.target.sizing_of(b, b.served)),
        "published_at": {
            e.name: sizing_json(r.target.sizing_of(b, e.variant)) for e in entries if e.variant is not None
        },
        "artifacts": artifacts,
    }
    refused = r.target.refusals(b)
    if refused:  # verified, but this target's server cannot serve them as verified
        out["not_published"] = {v.name: why for v, why in refused.items()}
    return out


def sizing_json(sizing: Sizing) -> Json:
    """A sizing as the manifest records it: its instances and each one's knobs."""
    return {"instances": sizing.instances, **{k: v for k, v in asdict(sizing.knobs).items() if v is not None}}


def _write_llm(lb: LLMBuild, r: Repository, root: Path) -> Json:
    artifacts: dict[str, str] = {}
    for entry in r.target.llm_models(lb):
        artifacts.update(_write_entry(entry, [], r.ctx, root))
    v = lb.verdict
    out: Json = {
        "kind": "llm",
        "dtype": v.dtype.value,
        "stages": _stages(lb.stages),
        "verification": {
            "passed": v.passed,
            "agreement": v.agreement,
            "mean_logprob_gap": v.mean_logprob_gap,
        },
        "artifacts": artifacts,
    }
    verify = next((s for s in lb.stages if s.name == "llm-verify"), None)
    if verify is not None and "choice" in verify.info:  # dtype auto: each candidate and the reason
        out["dtype_choice"] = verify.info["choice"]
    return out


def _stages(stages: list[StageResult]) -> Json:
    """Each stage's key and time, and what it says it did differently (int8 below opset 13), and
    what the INT8 search tried and kept (docs/quantization.md)."""
    return {
        s.name: {"key": s.key, "skipped": s.skipped, "seconds": round(s.seconds, 3)}
        | ({"note": s.info["note"]} if s.info.get("note") else {})
        | ({"search": s.info["search"]} if s.info.get("search") else {})
        for s in stages
    }


def _write_entry(
    entry: ModelEntry, outputs: list[TensorSpec], ctx: BuildContext, root: Path
) -> dict[str, str]:
    """The model folder with its labels; each built file's hash, by its path in the repository."""
    if (root / entry.name).exists():  # a published variant's name (<model>_<variant>) taken by a model
        message = "two of the spec's models would be published under this name"
        raise SpecError(message, file=ctx.spec_file, model=entry.name)
    version = write_entry(replace(entry, labels=_label_files(outputs, ctx, entry.name)), root)
    return {f"{entry.name}/1/{name}": file_hash(version / name) for name in entry.artifacts}


def _python_entry(pm: PythonModelSpec, r: Repository) -> ModelEntry:
    """The target's Python model with the spec's code (its folder's package) and ``files:``."""
    files = [resolve_file(extra, r.ctx.spec_file, pm.name, f"files[{i}]") for i, extra in enumerate(pm.files)]
    return replace(
        r.target.python_model(pm),
        sources=model_sources(r.ctx.spec_dir / pm.path),
        files={path.name: path for path in files},
    )


def _ensemble_entry(ens: EnsembleSpec, spec: Spec) -> ModelEntry:
    """An ensemble: its config and an empty version folder (Triton requires one)."""
    return ModelEntry(ensemble_config(ens, spec))


def _labels(outputs: list[TensorSpec], ctx: BuildContext, model: str) -> dict[str, list[str]]:
    """Each labelled output's labels file name and content."""
    return {
        label_file_name(out.labels): label_lines(out, ctx.spec_file, model, "outputs.labels")
        for out in outputs
        if out.labels
    }


def _label_files(outputs: list[TensorSpec], ctx: BuildContext, model: str) -> dict[str, str]:
    """Each labels file's name and text, one label a line."""
    labels = _labels(outputs, ctx, model)
    return {name: "".join(f"{line}\n" for line in lines) for name, lines in labels.items()}


def tool_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for tool in TOOLS:
        try:
            versions[tool] = metadata.version(tool)
        except metadata.PackageNotFoundError:
            continue
    return versions
