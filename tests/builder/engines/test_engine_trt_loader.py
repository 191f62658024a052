"""The TensorRT calls, against the recording TensorRT double (in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import TrtDouble, tiny_model

from builder.engines.request import BuildRequest, make_request
from builder.engines.trt_loader import EngineBuildError, build_plan
from builder.spec import Precision
from builder.spec.engine import EngineOptions, Int8Mode

STRONGLY_TYPED = 1 << 1


def _request(tmp_path: Path, variants, precision, major, table=None, **options) -> BuildRequest:
    return make_request(
        tiny_model(),
        EngineOptions(
            **{
                "workspace_mib": 512,
                "optimization_level": 4,
                "hardware_compatibility": "ampere_plus",
                **options,
            }
        ),
        precision,
        variants,
        table,
        major,
        plan=tmp_path / "model.plan",
        timing_cache=tmp_path / "cache" / "timing.cache",
    )


def test_fp16_on_10_sets_flag_profiles_and_limits(trt10: TrtDouble, tmp_path: Path, variants) -> None:
    plan = build_plan(_request(tmp_path, variants, Precision.FP16, 10))
    assert plan.startswith(b"PLAN-DOUBLE")
    assert trt10.named("create_network") == [[0]]
    assert trt10.named("parse_from_file") == [[str(variants[Precision.FP32])]]
    assert trt10.named("set_flag") == [["FP16"]]
    assert trt10.named("set_shape") == [
        ["input", [1, 3, 4, 4], [4, 3, 8, 8], [16, 3, 16, 16]],
        ["input", [1, 3, 32, 32], [8, 3, 32, 32], [16, 3, 64, 64]],
    ]
    assert trt10.named("add_optimization_profile") == [[0], [1]]
    assert trt10.named("set_memory_pool_limit") == [["WORKSPACE", 512 << 20]]
    assert trt10.named("config.builder_optimization_level") == [[4]]
    assert trt10.named("config.hardware_compatibility_level") == [["AMPERE_PLUS"]]


def test_fp16_on_11_is_strongly_typed_from_the_fp16_onnx(trt11: TrtDouble, tmp_path: Path, variants) -> None:
    build_plan(_request(tmp_path, variants, Precision.FP16, 11))
    assert trt11.named("create_network") == [[STRONGLY_TYPED]]
    assert trt11.named("parse_from_file") == [[str(variants[Precision.FP16])]]
    assert trt11.named("set_flag") == []  # TensorRT 11 has no FP16 flag; the double has none either


@pytest.mark.parametrize("fixture", ["trt10", "trt11"])
def test_int8_explicit_parses_the_qdq_onnx_without_flags(fixture, request, tmp_path, variants) -> None:
    double: TrtDouble = request.getfixturevalue(fixture)
    build_plan(_request(tmp_path, variants, Precision.INT8, double.module._MAJOR))
    assert double.named("parse_from_file") == [[str(variants[Precision.INT8])]]
    assert double.named("create_network") == [[STRONGLY_TYPED]]
    assert double.named("set_flag") == []
    assert double.named("config.int8_calibrator") == []


def test_int8_calibrator_on_10_feeds_the_table_and_no_batches(
    trt10, tmp_path, variants, calibration_table
) -> None:
    req = _request(tmp_path, variants, Precision.INT8, 10, calibration_table, int8_mode=Int8Mode.CALIBRATOR)
    build_plan(req)
    assert trt10.named("set_flag") == [["INT8"], ["FP16"]]
    ((calibrator,),) = trt10.named("config.int8_calibrator")
    assert calibrator == {
        "class": "IInt8EntropyCalibrator2",
        "table": calibration_table.read_text(),
        "batch": [],
    }
    assert trt10.named("set_calibration_profile") == [[0]]


def test_timing_cache_is_created_saved_and_reused(trt10: TrtDouble, tmp_path: Path, variants) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10)
    build_plan(req)
    saved = Path(req.timing_cache).read_bytes()
    assert saved == b"+timing"
    build_plan(req)
    assert trt10.named("create_timing_cache") == [[""], ["+timing"]]
    assert Path(req.timing_cache).read_bytes() == b"+timing+timing"


def test_parser_errors_name_the_node(trt10, tmp_path, variants, monkeypatch) -> None:
    monkeypatch.setenv("TRT_DOUBLE_PARSE_ERROR", "conv_17")
    with pytest.raises(EngineBuildError, match=r"node 'conv_17' \(Conv\): unsupported attribute"):
        build_plan(_request(tmp_path, variants, Precision.FP32, 10))


def test_a_build_without_engine_is_an_error(trt10, tmp_path, variants, monkeypatch) -> None:
    monkeypatch.setenv("TRT_DOUBLE_NO_ENGINE", "1")
    with pytest.raises(EngineBuildError, match="built no engine"):
        build_plan(_request(tmp_path, variants, Precision.FP32, 10))
    assert not Path(_request(tmp_path, variants, Precision.FP32, 10).timing_cache).exists()
