"""TensorRT plans for a ``gpu`` repository that is already built: what the serving image does at start.

The builder stage ran every stage and wrote the repository (its ``manifest.json`` names each
core model's stage keys, served variant and verification). Here only the plans are built: each
from the verified ONNX variants those stages left in the stage cache, checked against the
reference outputs there, then linked into the model's version folder of a copy of the
repository, which is swapped in (in a repository that is a mount point, such as KServe's
``/mnt/models``, a copy of each changed model, swapped in one by one inside it). No factory
runs, nothing is exported, and the repository's other entries stay as they are: an LLM entry
moved out to the vLLM image's repository (``builder.deploy.llm_repository``) is not put back.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.cache import file_hash, key_of
from builder.engines.build import EngineInput, EngineSet, build_all
from builder.errors import UserError
from builder.publish import (
    clean_leftovers,
    in_place,
    inner_staging_dir,
    publish,
    publish_entries,
    staging_dir,
)
from builder.records import EngineSummary, Log
from builder.repository import MANIFEST
from builder.spec import ModelSpec, Precision, Spec, Variant
from builder.stages.check import CheckInputs
from builder.stages.fp16 import Fp16Inputs
from builder.stages.int8 import Int8Inputs
from builder.stages.reference import ReferenceInputs
from builder.targets import engine_target
from builder.targets.writer import link, link_tree

Json = dict[str, Any]  # manifest.json as json.loads reads it
# The stage that holds each precision's ONNX (fp32 is the checked graph).
VARIANT_STAGE = {
    Precision.FP32: CheckInputs.STAGE,
    Precision.FP16: Fp16Inputs.STAGE,
    Precision.INT8: Int8Inputs.STAGE,
}


class RepositoryMismatch(UserError):
    """The repository is not one the spec's gpu build wrote, or its stages are gone."""


@dataclass(frozen=True)
class BuiltRepository:
    """A published repository and the manifest its build wrote."""

    path: Path
    manifest: Json

    @classmethod
    def read(cls, path: Path) -> BuiltRepository | None:
        """The repository at ``path``, or None where nothing was built there yet."""
        manifest = path / MANIFEST
        if not manifest.is_file():
            return None
        return cls(path.resolve(), json.loads(manifest.read_text()))

    def models(self) -> dict[str, Json]:
        return dict(self.manifest.get("models", {}))

    def check(self, spec_file: Path, target: str) -> None:
        """Built by ``target`` from this very spec file, or a one-line refusal."""
        where = self.path / MANIFEST
        if self.manifest.get("target") != target:
            raise RepositoryMismatch(
                f"a {self.manifest.get('target')} repository; plans go into a {target} one"
                f" (tritonforge build --target {target})",
                file=where,
                field="target",
            )
        if self.manifest.get("spec_sha256") != file_hash(spec_file):
            raise RepositoryMismatch(
                f"built from another version of {spec_file}; rebuild it with tritonforge build"
                f" --target {target}",
                file=where,
                field="spec_sha256",
            )


def engine_inputs(built: BuiltRepository, spec: Spec, cache: Path) -> list[EngineInput]:
    """Each core model's verified variants and reference, from the stages its manifest names."""
    models = built.models()
    return [_engine_input(model, _entry(models, model, built), cache) for model in spec.models]


def _entry(models: dict[str, Json], model: ModelSpec, built: BuiltRepository) -> Json:
    entry = models.get(model.name)
    if not isinstance(entry, dict) or entry.get("kind") != "onnx":
        raise RepositoryMismatch(
            "not in this repository (rebuild it)",
            file=built.path / MANIFEST,
            model=model.name,
            field="models",
        )
    return entry


def _engine_input(model: ModelSpec, entry: Json, cache: Path) -> EngineInput:
    stages: Json = entry["stages"]
    verification: Json = entry["verification"]

    def stage_dir(name: str) -> Path:
        folder = cache / model.name / name / str(stages[name]["key"])
        if not (folder / "stage.json").is_file():
            raise RepositoryMismatch(
                f"its {name} stage ({folder}) is not in the stage cache; pass the cache the"
                " repository was built with (--cache)",
                model=model.name,
                field="cache",
            )
        return folder

    variants = {p: stage_dir(s) / "model.onnx" for p, s in VARIANT_STAGE.items() if s in stages}
    passed = [p for p in variants if verification.get(p.value, {}).get("passed")]
    int8 = variants.get(Precision.INT8)
    table = int8.with_name("calibration.cache") if int8 is not None else None
    graph = Variant.parse(str(entry["served"])).precision.graph  # bf16 on OpenVINO: the FP32 graph
    served = graph if graph in variants else None
    return EngineInput(
        model, variants, passed, served, table if table and table.is_file() else None,
        stage_dir(ReferenceInputs.STAGE), engine_target().options(model).precision,
    )  # fmt: skip


def build_plans(
    built: BuiltRepository, spec: Spec, cache: Path, log: Log, *, require: bool
) -> tuple[EngineSet, bool]:
    """Build and verify the plans, install them; return the engine set and whether the
    repository changed (False: the plans it holds are already these)."""
    inputs = engine_inputs(built, spec, cache)
    engines = build_all(inputs, cache, log, require=require, previous_repository=built.path)
    summary = engines.summary()
    recorded = built.manifest.get("engines")
    if isinstance(recorded, dict) and recorded.get("key") == installed_key(summary):
        log(f"publish: {built.path} holds these plans already, skipped")
        return engines, False
    install(built, summary, list(engines.results))
    log(f"publish: {built.path} (its TensorRT plans)")
    return engines, True


def install(built: BuiltRepository, summary: EngineSummary, built_models: list[str]) -> None:
    """A linked copy of the repository with the plans of ``built_models`` replaced (a model
    without a verified plan now keeps none), swapped in whole; or, in a repository that is a
    mount point (KServe's ``/mnt/models``) or under a parent this user cannot write, a copy of
    those models only, swapped in one by one inside it."""
    clean_leftovers(built.path)
    inside = in_place(built.path)
    staging = inner_staging_dir(built.path) if inside else staging_dir(built.path)
    try:
        if inside:
            for name in built_models:
                link_tree(built.path / name, staging / name)
        else:
            link_tree(built.path, staging, rewritten=MANIFEST)
        manifest = _replace_plans(built, summary, built_models, staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        if inside:
            publish_entries(staging, built.path)
        else:
            publish(staging, built.path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _replace_plans(
    built: BuiltRepository, summary: EngineSummary, built_models: list[str], staging: Path
) -> Json:
    """Link each model's plans into its version folder under ``staging``; the new manifest."""
    models = built.models()
    for name in built_models:
        version = staging / name / "1"
        artifacts: dict[str, str] = dict(models[name].get("artifacts", {}))
        for old in [*version.glob("*.plan"), *version.glob("*.plan.json")]:
            old.unlink()
            artifacts.pop(f"{name}/1/{old.name}", None)
        for plan in summary.plans.get(name, []):
            for src in (plan.plan, plan.metadata):
                link(src, version / src.name)
                artifacts[f"{name}/1/{src.name}"] = file_hash(version / src.name)
        models[name] = {**models[name], "artifacts": artifacts}
    return {**built.manifest, "models": models, "engines": {"key": installed_key(summary)}}


def installed_key(summary: EngineSummary) -> str:
    """Changes with the plans installed (not with whether they were built or found fresh)."""
    return key_of(sorted((m, [file_hash(p.plan) for p in plans]) for m, plans in summary.plans.items()))
