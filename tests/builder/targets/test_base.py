"""What every target does alike (builder/targets/base.py): its options under ``targets.<name>``,
checked before any stage; the fastest allowed variant served; a named precision that failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import SpecError, VerificationError
from builder.spec import Variant
from builder.targets import get
from builder.targets.base import TargetOptions, unknown_targets
from tests.builder.targets.builds import BF16, FP32, OV, built, loaded


def test_serve_names_one_precision_or_several(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"local": {"serve": ["fp32", "bf16"]}, "gpu": {"serve": "fp32"}})
    local, gpu = get("local").options(spec), get("gpu").options(spec)
    assert local.precisions == [FP32, BF16] and local.precision is None
    assert gpu.precision is FP32 and get("cpu").options(spec) == TargetOptions()


def test_an_option_a_target_does_not_take_is_one_line_naming_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"cpu": {"spinning": True}, "local": {"serve": "fp64"}})
    with pytest.raises(SpecError) as caught:
        get("cpu").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.cpu.spinning" and "Extra inputs" in caught.value.message
    with pytest.raises(SpecError) as caught:
        get("local").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.local.serve"


def test_a_precision_served_must_be_made(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"cpu": {"serve": "int8"}})
    with pytest.raises(SpecError, match="'int8' is not in precisions") as caught:
        get("cpu").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.cpu.serve"


def test_targets_names_registered_targets(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"tpu": {"serve": "fp32"}})
    with pytest.raises(SpecError) as caught:
        unknown_targets(spec, ["local", "cpu", "gpu"], tmp_path / "models.yaml")
    assert caught.value.field == "targets.tpu" and "unknown target 'tpu'" in str(caught.value)


def test_a_named_precision_that_did_not_pass_is_refused_with_its_failures(tmp_path: Path) -> None:
    b = built(
        loaded(tmp_path, targets={"local": {"serve": "bf16"}}), {Variant(FP32): 10.0, Variant(BF16, OV): None}
    )
    with pytest.raises(VerificationError, match="off") as caught:
        get("local").choose_served(b, tmp_path / "models.yaml")
    assert caught.value.field == "targets.local.serve"


def test_a_pinned_runtime_serves_its_fastest_on_every_target(tmp_path: Path) -> None:
    timings = {Variant(FP32): 10.0, Variant(BF16, OV): 2.0}
    onnx_only = built(loaded(tmp_path, serve={"runtime": "onnxruntime"}), timings)
    for name in ("local", "cpu", "gpu"):
        assert get(name).choose_served(onnx_only, tmp_path / "models.yaml") == Variant(FP32), name
