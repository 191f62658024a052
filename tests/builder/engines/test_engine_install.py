"""Installing plans into a new repository keeps what other GPU generations built (cc_model_filenames)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.engines.build import EngineSet
from builder.engines.detect import GPU, TensorRTAvailability
from builder.engines.metadata import Fingerprint, PlanMetadata, sha256, write_metadata
from builder.engines.plan import EngineResult, Status
from builder.spec import Precision

L4 = TensorRTAvailability(True, "", "10.13.0.35", GPU("NVIDIA L4", "8.9"))
CC_FILES = {"8.6": "model.sm86.plan", "8.9": "model.sm89.plan"}


def _plan(folder: Path, name: str, cc: str, onnx: str, body: bytes = b"plan", **changes: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / name
    plan.write_bytes(body + cc.encode())
    meta = PlanMetadata("tiny", "fp16", "10.13.0.35", "GPU", cc, "NONE", onnx, "opt", sha256(plan))
    meta.profile_count = 2
    for key, value in changes.items():
        setattr(meta, key, value)
    write_metadata(plan, meta)
    return plan


def _engines(tmp_path: Path, previous: Path) -> EngineSet:
    built = _plan(tmp_path / "cache" / "fp16", "model.sm89.plan", "8.9", "onnx-now")
    engines = EngineSet(L4, cc_files={"tiny": CC_FILES}, profile_counts={"tiny": 2})
    now = Fingerprint("onnx-now", "opt")
    engines.results["tiny"] = [EngineResult("tiny", Precision.FP16, Status.BUILT, "", built, now)]
    engines.previous_repository = previous
    return engines


def installed(engines: EngineSet) -> list[Path]:
    """The plans the repository writer is handed for the model, the served one first."""
    return [p.plan for p in engines.summary().plans.get("tiny", [])]


def test_a_build_on_a_second_gpu_keeps_the_first_gpus_plan(tmp_path: Path) -> None:
    previous = tmp_path / "repo"
    kept = _plan(previous / "tiny" / "1", "model.sm86.plan", "8.6", "onnx-now")  # built on an A10 earlier
    plans = installed(_engines(tmp_path, previous))
    assert [p.name for p in plans] == ["model.sm89.plan", "model.sm86.plan"]
    assert plans[1] == kept
    metadata = [p.metadata.name for p in _engines(tmp_path, previous).summary().plans["tiny"]]
    assert metadata == ["model.sm89.plan.json", "model.sm86.plan.json"]


def test_other_gpus_plans_of_an_older_onnx_or_altered_are_dropped(tmp_path: Path) -> None:
    previous = tmp_path / "repo"
    _plan(previous / "tiny" / "1", "model.sm86.plan", "8.6", "onnx-before")  # the model changed since
    assert [p.name for p in installed(_engines(tmp_path, previous))] == ["model.sm89.plan"]
    altered = _plan(previous / "tiny" / "1", "model.sm86.plan", "8.6", "onnx-now")
    altered.write_bytes(b"not the plan its metadata describes")
    assert [p.name for p in installed(_engines(tmp_path, previous))] == ["model.sm89.plan"]


def test_this_gpus_old_plan_is_replaced_not_kept(tmp_path: Path) -> None:
    previous = tmp_path / "repo"
    _plan(previous / "tiny" / "1", "model.sm89.plan", "8.9", "onnx-now", body=b"old")
    plans = installed(_engines(tmp_path, previous))
    assert len(plans) == 1 and plans[0].read_bytes() == b"plan8.9"


@pytest.mark.parametrize(
    "changes",
    [
        {"tensorrt_version": "10.12.0.36"},  # the server's TensorRT cannot load it
        {"tensorrt_cuda": "cu13"},  # another CUDA build of the same TensorRT
        {"options_sha256": "other options"},  # built with other profiles, flags or limits
        {"profile_count": 1},  # the config lists two profiles
        {"precision": "int8"},  # no int8 plan verified here: its options are not known
    ],
)
def test_another_gpus_plan_is_kept_only_when_the_server_can_load_it_as_configured(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    previous = tmp_path / "repo"
    _plan(previous / "tiny" / "1", "model.sm86.plan", "8.6", "onnx-now", **changes)
    assert [p.name for p in installed(_engines(tmp_path, previous))] == ["model.sm89.plan"]
