"""The gpu target (builder/targets/gpu.py): one TensorRT plan per model, of the precision the spec
names or else TensorRT's preference among those verified on ONNX Runtime, with ONNX Runtime's fp32
beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import SpecError
from builder.spec import Precision, Variant
from builder.targets import get
from tests.builder.targets.builds import BF16, FP16, FP32, INT8, OV, built, loaded

GPU = get("gpu")


def test_it_serves_what_tensorrt_has_kernels_for(tmp_path: Path) -> None:
    assert all(GPU.serves(Variant(p)) for p in (FP32, FP16, INT8))
    assert not GPU.serves(Variant(Precision.INT8_DYNAMIC)) and not GPU.serves(Variant(BF16, OV))


def test_tensorrts_preference_not_the_cpu_timing_chooses(tmp_path: Path) -> None:
    spec = loaded(tmp_path, precisions=["fp32", "fp16", "int8"])
    b = built(spec, {Variant(FP32): 1.0, Variant(FP16): 9.0, Variant(INT8): 5.0})
    assert GPU.choose_served(b, tmp_path / "models.yaml") == Variant(INT8)
    named = built(loaded(tmp_path, precisions=["fp32", "fp16", "int8"], targets={"gpu": {"serve": "fp16"}}),
                  {Variant(FP32): 1.0, Variant(FP16): 9.0, Variant(INT8): 5.0})  # fmt: skip
    assert GPU.choose_served(named, tmp_path / "models.yaml") == Variant(FP16)


def test_dynamic_int8_is_refused_before_any_stage(tmp_path: Path) -> None:
    spec = loaded(tmp_path, precisions=["fp32", "int8_dynamic"], targets={"gpu": {"serve": "int8_dynamic"}})
    with pytest.raises(SpecError) as caught:
        GPU.check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.gpu.serve" and "int8_dynamic has no TensorRT kernels" in str(
        caught.value
    )


def test_the_plan_and_onnx_runtimes_fp32_beside_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path, precisions=["fp32", "int8"])
    b = built(spec, {Variant(FP32): 1.0, Variant(INT8): 2.0})
    b.served = GPU.choose_served(b, tmp_path / "models.yaml")
    plan, fallback = GPU.core_models(b, None)
    assert plan.config.platform == "tensorrt_plan" and plan.variant == Variant(INT8)
    assert fallback.name == "m_onnx" and fallback.config.platform == "onnxruntime_onnx"
    assert GPU.published(b) == {"m": Variant(INT8)}
