"""Options, profiles, per-version recipes and the trtexec reproduce command."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import tiny_model
from pydantic import ValidationError

from builder.engines.profiles import profile_shapes
from builder.engines.repro import trtexec_command
from builder.engines.request import RecipeError, make_request
from builder.spec import Precision, load_spec
from builder.spec.engine import EngineOptions, Int8Mode, cc_model_filenames, plan_filename
from builder.targets import get

ROOT = Path(__file__).resolve().parents[3]


def test_profiles_follow_the_spec_and_max_batch_size() -> None:
    shapes = profile_shapes(tiny_model())
    assert [(r.name, r.min, r.opt, r.max) for p in shapes for r in p] == [
        ("input", (1, 3, 4, 4), (4, 3, 8, 8), (16, 3, 16, 16)),
        ("input", (1, 3, 32, 32), (8, 3, 32, 32), (16, 3, 64, 64)),
    ]


def test_zoo_resnet18_profile_matches_its_config_numbers() -> None:
    model = load_spec(ROOT / "models.yaml").model("resnet18")
    (profile,) = profile_shapes(model)
    assert profile[0].min == (1, 3, 224, 224)
    assert profile[0].opt == (model.opt_batch(), 3, 224, 224)
    assert profile[0].max == (model.max_batch_size, 3, 224, 224)


def test_fixed_unbatched_model_needs_no_profile() -> None:
    model = tiny_model(
        inputs=[{"name": "input", "dtype": "FP32", "dims": [3, 8, 8]}],
        outputs=[{"name": "logits", "dtype": "FP32", "dims": [3, 8, 8]}],
        max_batch_size=0,
        profiles=[],
    )
    assert profile_shapes(model) == []


def test_options_are_validated() -> None:
    with pytest.raises(ValidationError):
        EngineOptions.model_validate({"optimization_level": 6})
    with pytest.raises(ValidationError):
        EngineOptions.model_validate({"cc_model_filenames": ["sm86"]})
    with pytest.raises(ValidationError):
        EngineOptions.model_validate({"workspace": 1024})


def test_cc_model_filenames_name_one_plan_per_compute_capability() -> None:
    options = EngineOptions(cc_model_filenames=["8.0", "8.6"])
    assert cc_model_filenames(options) == {"8.0": "model.sm80.plan", "8.6": "model.sm86.plan"}
    assert plan_filename(options, "8.6") == "model.sm86.plan"
    assert plan_filename(EngineOptions(), "8.6") == "model.plan"


VERSIONS = {10: "10.13.0.35", 11: "11.4.0.1"}


def _request(variants, table, precision, major, **options):
    return make_request(
        tiny_model(),
        EngineOptions(**options),
        precision,
        variants,
        table,
        VERSIONS.get(major, major),
        plan=Path("/out/model.plan"),
        timing_cache=Path("/cache/timing.cache"),
    )


def test_fp16_uses_the_builder_flag_on_10_and_the_fp16_onnx_on_11(variants, calibration_table) -> None:
    on10 = _request(variants, None, Precision.FP16, 10)
    assert (on10.onnx, on10.strongly_typed, on10.builder_flags) == (
        str(variants[Precision.FP32]),
        False,
        ["FP16"],
    )
    on11 = _request(variants, None, Precision.FP16, 11)
    assert (on11.onnx, on11.strongly_typed, on11.builder_flags) == (str(variants[Precision.FP16]), True, [])


def test_int8_explicit_on_10_lets_the_layers_outside_qdq_run_in_fp16(variants) -> None:
    # Strongly typed, every layer without Q/DQ would run in FP32: `trtexec --int8 --fp16` instead.
    req = _request(variants, None, Precision.INT8, 10)
    assert (req.onnx, req.strongly_typed, req.builder_flags, req.calibration_table) == (
        str(variants[Precision.INT8]),
        False,
        ["INT8", "FP16"],
        None,
    )
    cmd = trtexec_command(req, Path("/out/model.plan"))
    assert "--int8" in cmd and "--fp16" in cmd and "--stronglyTyped" not in cmd


def test_int8_explicit_on_11_builds_the_qdq_onnx_strongly_typed(variants) -> None:
    req = _request(variants, None, Precision.INT8, 11)  # TensorRT 11 has no FP16/INT8 flags
    assert (req.onnx, req.strongly_typed, req.builder_flags, req.calibration_table) == (
        str(variants[Precision.INT8]),
        True,
        [],
        None,
    )


def test_the_default_zoo_lets_measured_speed_choose_the_gpu_plan() -> None:
    spec = load_spec(ROOT / "models.yaml")
    gpu = get("gpu")
    assert {m.name: gpu.options(m).precision for m in spec.models if gpu.options(m).precision} == {}


def test_int8_calibrator_uses_the_table_on_10_only(variants, calibration_table) -> None:
    req = _request(variants, calibration_table, Precision.INT8, 10, int8_mode=Int8Mode.CALIBRATOR)
    assert req.onnx == str(variants[Precision.FP32])
    assert req.builder_flags == ["INT8", "FP16"] and req.calibration_table == str(calibration_table)
    with pytest.raises(RecipeError, match="needs TensorRT 10"):
        _request(variants, calibration_table, Precision.INT8, 11, int8_mode=Int8Mode.CALIBRATOR)
    with pytest.raises(RecipeError, match="no calibration table"):
        _request(variants, None, Precision.INT8, 10, int8_mode=Int8Mode.CALIBRATOR)


def test_missing_variant_is_a_clear_error(variants) -> None:
    del variants[Precision.FP16]
    with pytest.raises(RecipeError, match="fp16 ONNX variant is missing"):
        _request(variants, None, Precision.FP16, 11)


def test_trtexec_command_matches_the_request(variants) -> None:
    req = _request(variants, None, Precision.FP16, 10, workspace_mib=512, optimization_level=4)
    cmd = trtexec_command(req, Path("/out/model.plan"))
    assert cmd[:3] == ["trtexec", f"--onnx={variants[Precision.FP32]}", "--saveEngine=/out/model.plan"]
    assert "--fp16" in cmd and "--stronglyTyped" not in cmd
    assert cmd.count("--minShapes=input:1x3x4x4") == 1 and "--maxShapes=input:16x3x64x64" in cmd
    assert "--memPoolSize=workspace:512M" in cmd and "--builderOptimizationLevel=4" in cmd
    assert "--timingCacheFile=/cache/timing.cache" in cmd


def test_same_compute_capability_needs_10_9_and_the_request_says_so(variants) -> None:
    with pytest.raises(
        RecipeError,
        match=r"engine.hardware_compatibility 'same_compute_capability': "
        r"HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY needs TensorRT 10.9 or newer; "
        r"this machine has 10.8.0.43",
    ):
        _request(
            variants, None, Precision.FP16, "10.8.0.43", hardware_compatibility="same_compute_capability"
        )
    assert _request(
        variants, None, Precision.FP16, "10.9.0.34", hardware_compatibility="same_compute_capability"
    )
    assert _request(variants, None, Precision.FP16, "10.8.0.43", hardware_compatibility="ampere_plus")
