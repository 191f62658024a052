"""The build: stages skipped when unchanged, the manifest, what is published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from builder.pipeline import build
from builder.records import BATCH_INVARIANCE, BuildOptions, BuildResult
from builder.spec import Precision, Variant
from tests.conftest import tree_digest

pytestmark = pytest.mark.slow


def run(project: Path, lines: list[str] | None = None, target: str = "local") -> BuildResult:
    return build(
        BuildOptions(
            spec_file=project / "models.yaml",
            repo=project / f"model_repository{'' if target == 'local' else '-' + target}",
            target=target,
            log=(lines.append if lines is not None else lambda _: None),
        )
    )


def test_second_build_skips_every_stage_and_publish(tiny_project: Path) -> None:
    first = run(tiny_project)
    assert first.published
    digest = tree_digest(tiny_project / "model_repository")
    lines: list[str] = []
    second = run(tiny_project, lines)
    assert not second.published
    assert all(stage.skipped for b in second.models for stage in b.stages)
    assert any("up to date, skipped" in line for line in lines)
    assert tree_digest(tiny_project / "model_repository") == digest


def test_a_second_targets_int8_is_quantized_from_the_first_ones_calibration(tiny_project: Path) -> None:
    """The gpu target's recipe (TensorRT's: float biases) differs from local's, its calibration
    does not: it runs once."""
    first = {s.name: s for b in run(tiny_project).models for s in b.stages}
    gpu = {s.name: s for b in run(tiny_project, target="gpu").models for s in b.stages}
    assert gpu["int8-ranges"].skipped and gpu["int8-ranges"].key == first["int8-ranges"].key
    assert not gpu["int8"].skipped and gpu["int8"].info["sha256"] != first["int8"].info["sha256"]


def test_a_changed_tolerance_reruns_only_verification(tiny_project: Path) -> None:
    run(tiny_project)
    spec = tiny_project / "models.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc["models"][0]["tolerances"]["int8"] = {"min_cosine": 0.9}
    spec.write_text(yaml.safe_dump(doc))
    again = run(tiny_project)
    ran = {s.name for b in again.models for s in b.stages if not s.skipped}
    # the INT8 search (it keeps the first graph that meets the tolerance), the int8 graph on each
    # runtime (and, measured, the race's finalists may be sized anew)
    assert {s for s in ran if not s.startswith("size-")} == {"int8", "verify-int8", "verify-int8_openvino"}


def test_manifest_records_inputs_artifacts_tools_and_metrics(tiny_project: Path) -> None:
    result = run(tiny_project)
    manifest = json.loads((tiny_project / "model_repository" / "manifest.json").read_text())
    entry = manifest["models"]["tiny"]
    assert entry["served"] == str(result.models[0].served)
    assert set(entry["verification"]) == {"fp32", "fp16", "int8", "fp32_openvino", "int8_openvino"}
    assert entry["verification"]["int8_openvino"]["runtime"] == "openvino"
    assert entry["verification"]["fp32_openvino"]["computed_in"] == "f32"
    assert entry["verification"]["fp32"]["batch_max_diff"] <= BATCH_INVARIANCE
    assert entry["verification"]["int8"]["passed"] is True
    assert {"export", "check", "reference", "int8", "verify-int8"} <= set(entry["stages"])
    assert all(len(h) == 64 for h in entry["artifacts"].values())
    assert {"onnx", "onnxruntime", "python"} <= set(manifest["tools"])


def test_every_passing_variant_is_published(tiny_project: Path) -> None:
    result = run(tiny_project)
    served = result.models[0].served
    repo = tiny_project / "model_repository"
    published = {p.name for p in repo.iterdir() if p.is_dir()}
    # Beside the served one: every other ONNX Runtime variant (an OpenVINO one serves when it wins).
    others = {
        f"tiny_{p.value}" for p in (Precision.FP32, Precision.FP16, Precision.INT8) if Variant(p) != served
    }
    assert published == {"tiny"} | others
    assert (repo / "tiny" / "1" / "model.py").is_file()


def test_the_stage_cache_is_absolute_even_when_the_spec_path_is_not(tmp_path: Path, monkeypatch) -> None:
    """Stages hand cache paths to child processes that run in other folders (vLLM's engine)."""
    from builder import pipeline

    monkeypatch.chdir(tmp_path)
    cache = pipeline._cache(BuildOptions(Path("models.yaml"), Path("model_repository")))
    assert cache.root.is_absolute() and cache.root == tmp_path / ".tritonforge" / "cache"
