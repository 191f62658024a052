"""Plan metadata and the staleness decision (real files, real hashes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.engines.detect import GPU, TensorRTAvailability, cuda_flavour
from builder.engines.metadata import (
    Fingerprint,
    PlanMetadata,
    sha256,
    stale_reason,
    verification_key,
    write_metadata,
)

BUILT_ON = TensorRTAvailability(True, "", "10.13.0.35", GPU("NVIDIA A10", "8.6"))
FP = Fingerprint("onnx-hash", "options-hash")


def _plan(tmp_path: Path, compat: str = "NONE", cuda: str = "", verified_with: str = "") -> Path:
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"serialized engine")
    write_metadata(
        plan,
        PlanMetadata(
            model="tiny",
            precision="fp16",
            tensorrt_version="10.13.0.35",
            gpu_name="NVIDIA A10",
            compute_capability="8.6",
            hardware_compatibility=compat,
            onnx_sha256=FP.onnx_sha256,
            options_sha256=FP.options_sha256,
            plan_sha256=sha256(plan),
            tensorrt_cuda=cuda,
            verification_sha256=verified_with,
        ),
    )
    return plan


def _here(version: str = "10.13.0.35", name: str = "NVIDIA A10", cc: str = "8.6") -> TensorRTAvailability:
    return TensorRTAvailability(True, "", version, GPU(name, cc))


def test_metadata_records_version_gpu_and_hashes(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    text = (tmp_path / "model.plan.json").read_text()
    for value in ("10.13.0.35", "NVIDIA A10", '"8.6"', "onnx-hash", "options-hash", sha256(plan)):
        assert value in text


def test_a_plan_built_here_is_fresh(tmp_path: Path) -> None:
    assert stale_reason(_plan(tmp_path), _here(), FP) is None


@pytest.mark.parametrize(
    ("here", "expected", "reason"),
    [
        (_here(version="10.14.1.48"), FP, "built with TensorRT 10.13.0.35"),
        (_here(name="NVIDIA L4", cc="8.9"), FP, "this GPU is NVIDIA L4 (sm 8.9)"),
        (_here(name="NVIDIA A10G"), FP, "this GPU is NVIDIA A10G"),
        (_here(), Fingerprint("other", FP.options_sha256), "the ONNX model changed"),
        (_here(), Fingerprint(FP.onnx_sha256, "other"), "the build options changed"),
        (TensorRTAvailability(False, "TensorRT is not installed"), FP, "cannot check it here"),
    ],
)
def test_stale_plans_say_why(
    tmp_path: Path, here: TensorRTAvailability, expected: Fingerprint, reason: str
) -> None:
    assert reason in (stale_reason(_plan(tmp_path), here, expected) or "")


def test_ampere_plus_plans_fit_any_gpu_from_sm80(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "AMPERE_PLUS")
    assert stale_reason(plan, _here(name="NVIDIA H100", cc="9.0"), FP) is None
    assert "Ampere or newer" in (stale_reason(plan, _here(name="Tesla T4", cc="7.5"), FP) or "")


def test_same_compute_capability_plans_fit_another_gpu_of_that_capability(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "SAME_COMPUTE_CAPABILITY")
    assert stale_reason(plan, _here(name="NVIDIA A40"), FP) is None
    assert stale_reason(plan, _here(name="NVIDIA L4", cc="8.9"), FP) is not None


def test_a_changed_or_missing_plan_or_metadata_is_stale(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    plan.write_bytes(b"something else")
    assert "differs" in (stale_reason(plan, _here(), FP) or "")
    (tmp_path / "model.plan.json").unlink()
    assert stale_reason(plan, _here(), FP) == "no readable metadata"
    plan.unlink()
    assert stale_reason(plan, _here(), FP) == "no plan"


def test_a_plan_for_another_cuda_build_of_the_same_tensorrt_is_stale(tmp_path: Path) -> None:
    plan = _plan(tmp_path, cuda="cu12")
    here = TensorRTAvailability(True, "", "10.13.0.35", GPU("NVIDIA A10", "8.6"), cuda="cu13")
    assert (
        stale_reason(plan, here, FP) == "built with TensorRT 10.13.0.35 for cu12, this machine's is for cu13"
    )
    assert stale_reason(_plan(tmp_path, cuda="cu13"), here, FP) is None
    assert cuda_flavour(["tensorrt-cu13-bindings", "numpy"]) == "cu13"
    assert cuda_flavour(["tensorrt_cu12_libs", "tensorrt-cu12"]) == "cu12"
    assert cuda_flavour(["tensorrt_stubs"]) == ""


def test_a_changed_tolerance_or_evaluation_set_verifies_again(tmp_path: Path) -> None:
    key = verification_key({"min_cosine": 0.999}, {"input": np.zeros((2, 3), np.float32)})
    plan = _plan(tmp_path, verified_with=key)
    assert stale_reason(plan, _here(), Fingerprint(FP.onnx_sha256, FP.options_sha256, key)) is None
    for other in (
        verification_key({"min_cosine": 0.99}, {"input": np.zeros((2, 3), np.float32)}),
        verification_key({"min_cosine": 0.999}, {"input": np.ones((2, 3), np.float32)}),
    ):
        expected = Fingerprint(FP.onnx_sha256, FP.options_sha256, other)
        assert (
            stale_reason(plan, _here(), expected)
            == "the tolerance or the evaluation data changed: verified again"
        )
