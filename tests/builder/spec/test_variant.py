"""Variants: a precision on a runtime, what the spec may ask of them, and how a target serves them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.errors import SpecError
from builder.records import ModelBuild, VerificationReport
from builder.spec import ModelSpec, Precision, Variant, load_spec

FP32, BF16, INT8 = Precision.FP32, Precision.BF16, Precision.INT8
OV = "openvino"


def model(**fields: object) -> dict[str, object]:
    return {
        "name": "m",
        "source": "pkg.mod:fn",
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
        "max_batch_size": 8,
        "evaluation": {"data": "eval.npz"},
        "precisions": ["fp32", "bf16"],
        "tolerances": {"fp32": {"min_cosine": 0.99}, "bf16": {"min_cosine": 0.99}},
        **fields,
    }


def loaded(tmp_path: Path, **fields: object) -> ModelSpec:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model(**fields)]}))
    return load_spec(path).models[0]


def error(tmp_path: Path, **fields: object) -> str:
    with pytest.raises(SpecError) as caught:
        loaded(tmp_path, **fields)
    return caught.value.one_line()


def test_names_are_the_precision_on_onnxruntime_and_carry_any_other_runtime() -> None:
    assert Variant(INT8).name == "int8" and Variant(BF16, OV).name == "bf16_openvino"
    for variant in (Variant(INT8), Variant(Precision.INT8_DYNAMIC), Variant(BF16, OV), Variant(FP32, OV)):
        assert Variant.parse(variant.name) == variant
    with pytest.raises(ValueError, match="names no variant"):
        Variant.parse("bf16")  # no runtime of ONNX Runtime's computes bf16


def test_each_precision_is_made_on_every_runtime_that_runs_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path)
    assert spec.variants() == [Variant(FP32), Variant(FP32, OV), Variant(BF16, OV)]
    assert loaded(tmp_path, precisions=["fp32"], runtimes=["onnxruntime"]).variants() == [Variant(FP32)]


def test_a_precision_no_wanted_runtime_runs_is_refused(tmp_path: Path) -> None:
    said = error(tmp_path, runtimes=["onnxruntime"])
    assert "models.yaml" in said and "precisions" in said and "bf16 needs a runtime" in said


def test_a_pinned_runtime_must_be_wanted(tmp_path: Path) -> None:
    said = error(tmp_path, precisions=["fp32"], runtimes=["onnxruntime"], serve={"runtime": "openvino"})
    assert "serve.runtime" in said


def built(spec: ModelSpec, timings: dict[Variant, float | None], moved: float | None = None) -> ModelBuild:
    b = ModelBuild(spec)
    for variant, ms in timings.items():
        b.variants[variant] = Path("model.onnx")
        b.reports[variant] = VerificationReport(variant, ms is not None, {}, [] if ms else ["off"], ms,
                                                batch_max_diff=moved)  # fmt: skip
    return b
