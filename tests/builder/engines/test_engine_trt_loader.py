"""The TensorRT calls, against the recording TensorRT double (in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import TrtDouble, fixed_model, tiny_model, write_onnx

from builder.engines.calibrator import calibration_header, with_header
from builder.engines.profiles import InputRange
from builder.engines.request import BuildRequest, make_request
from builder.engines.trt_loader import EngineBuildError, build_plan
from builder.spec import Precision
from builder.spec.engine import EngineOptions, Int8Mode

STRONGLY_TYPED = 1 << 1


def _request(tmp_path: Path, variants, precision, major, table=None, model=None, **options) -> BuildRequest:
    return make_request(
        tiny_model() if model is None else model,
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
        {10: "10.13.0.35", 11: "11.4.0.1"}[major],
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


@pytest.mark.parametrize(
    ("fixture", "network", "flags"), [("trt10", 0, [["FP16"], ["INT8"]]), ("trt11", 2, [])]
)
def test_int8_explicit_parses_the_qdq_onnx_with_fp16_allowed_on_10(
    fixture, network, flags, request, tmp_path, variants
) -> None:
    double: TrtDouble = request.getfixturevalue(fixture)
    build_plan(_request(tmp_path, variants, Precision.INT8, double.module._MAJOR))
    assert double.named("parse_from_file") == [[str(variants[Precision.INT8])]]
    assert double.named("create_network") == [[network]]
    assert double.named("set_flag") == flags
    assert double.named("config.int8_calibrator") == []


def test_int8_calibrator_on_10_feeds_the_table_under_the_running_versions_header(
    trt10, tmp_path, variants, calibration_table
) -> None:
    req = _request(tmp_path, variants, Precision.INT8, 10, calibration_table, int8_mode=Int8Mode.CALIBRATOR)
    build_plan(req)  # the table's header is TensorRT 8.6's: TensorRT skips such a cache, then fails
    assert trt10.named("set_flag") == [["FP16"], ["INT8"]]  # in Polygraphy's CreateConfig order
    ((calibrator,),) = trt10.named("config.int8_calibrator")
    body = calibration_table.read_text().split("\n", 1)[1]
    assert calibrator == {
        "class": "IInt8EntropyCalibrator2",
        "table": "TRT-101300-EntropyCalibration2\n" + body,
        "batch": None,  # Polygraphy's Calibrator with no data: TensorRT's "no more batches"
    }
    assert trt10.named("calibration_cache_rejected") == []
    assert trt10.named("calibration_unknown_tensors") == [[[]]]  # every name is a tensor of the graph parsed
    # Polygraphy calibrates under the last profile (the table makes the shapes moot)
    assert trt10.named("set_calibration_profile") == [
        [{"input": [[1, 3, 32, 32], [8, 3, 32, 32], [16, 3, 64, 64]]}]
    ]


def _fixed_request(tmp_path: Path, onnx: Path, table: Path) -> BuildRequest:
    """INT8 calibrator mode for a model of fixed shapes without batching: the spec has no profile."""
    variants = {Precision.FP32: onnx}
    return _request(
        tmp_path, variants, Precision.INT8, 10, table, fixed_model(), int8_mode=Int8Mode.CALIBRATOR
    )


def test_int8_calibrator_on_a_fixed_shape_model_calibrates_under_its_own_shapes(
    trt10, tmp_path, calibration_table
) -> None:
    req = _fixed_request(tmp_path, write_onnx(tmp_path / "fixed.onnx", "fp32", (3, 8, 8)), calibration_table)
    assert req.profiles == []
    # Polygraphy calibrates under its last profile: with none given it makes one of the fixed shapes
    assert build_plan(req).startswith(b"PLAN-DOUBLE")
    assert trt10.named("add_optimization_profile") == [[0]]
    assert trt10.named("set_calibration_profile") == [[{"input": [[3, 8, 8]] * 3}]]


def test_a_dynamic_onnx_input_the_spec_gives_fixed_dims_is_refused_before_building(
    trt10, tmp_path, variants, calibration_table
) -> None:
    req = _fixed_request(tmp_path, variants[Precision.FP32], calibration_table)
    with pytest.raises(
        EngineBuildError,
        match=r"no optimization profile: the spec gives 'input' fixed dims but the ONNX model's "
        r"input shape is \[-1, 3, -1, -1\]",
    ):
        build_plan(req)
    assert trt10.named("build_serialized_network") == []


def test_calibration_header_follows_tensorrts_version_number() -> None:
    assert calibration_header("10.13.3.9") == "TRT-101303-EntropyCalibration2"
    assert calibration_header("10.8.0.43") == "TRT-100800-EntropyCalibration2"
    assert (
        with_header(b"TRT-0-EntropyCalibration2\nx: 3c\n", "10.9.0.34")
        == b"TRT-100900-EntropyCalibration2\nx: 3c\n"
    )


def _saved_cache(*entries: str) -> bytes:
    return b"TIMING-DOUBLE 10.13.0.35 sm86\n" + "".join(entries).encode()


def test_timing_cache_is_created_saved_and_reused(trt10: TrtDouble, tmp_path: Path, variants) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10)
    build_plan(req)
    assert Path(req.timing_cache).read_bytes() == _saved_cache("+timing")
    build_plan(req)
    # read for the config, then again by EngineBytesFromNetwork to combine with the new entries
    saved = _saved_cache("+timing").decode()
    assert trt10.named("create_timing_cache") == [[""], [saved], [saved]]
    assert trt10.named("set_timing_cache") == [[True], [True]]
    assert Path(req.timing_cache).read_bytes() == _saved_cache("+timing", "+timing")


@pytest.mark.parametrize(
    "old", [b"TIMING-DOUBLE 10.12.0.36 sm86\n+timing", b"TIMING-DOUBLE 10.13.0.35 sm89\n+timing", b"garbage"]
)
def test_a_timing_cache_of_another_version_or_gpu_is_replaced_not_fatal(
    trt10: TrtDouble, tmp_path: Path, variants, old: bytes
) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10)
    Path(req.timing_cache).parent.mkdir(parents=True)
    Path(req.timing_cache).write_bytes(old)
    assert build_plan(req).startswith(b"PLAN-DOUBLE")
    assert trt10.named("set_timing_cache") == [[False], [True]]  # refused, then a fresh one
    assert Path(req.timing_cache).read_bytes() == _saved_cache("+timing")


def test_parser_errors_name_the_node(trt10, tmp_path, variants, monkeypatch) -> None:
    monkeypatch.setenv("TRT_DOUBLE_PARSE_ERROR", "conv_17")
    with pytest.raises(EngineBuildError, match=r"node 'conv_17' \(Conv\): unsupported attribute"):
        build_plan(_request(tmp_path, variants, Precision.FP32, 10))


def test_a_build_without_engine_is_an_error(trt10, tmp_path, variants, monkeypatch) -> None:
    monkeypatch.setenv("TRT_DOUBLE_NO_ENGINE", "1")
    with pytest.raises(EngineBuildError, match="built no engine"):
        build_plan(_request(tmp_path, variants, Precision.FP32, 10))
    assert not Path(_request(tmp_path, variants, Precision.FP32, 10).timing_cache).exists()


def test_shapes_tensorrt_refuses_fail_with_the_profile_and_input_named(trt10, tmp_path, variants) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10)
    req.profiles[1] = [InputRange("input", (1, 3, 32, 32), (8, 3, 16, 16), (16, 3, 64, 64))]  # opt < min
    with pytest.raises(
        EngineBuildError,
        match=r"profiles\[1\]: TensorRT rejected the shapes of 'input' \(min \[1, 3, 32, 32\], "
        r"opt \[8, 3, 16, 16\], max \[16, 3, 64, 64\]\): Shape provided for opt is inconsistent",
    ):
        build_plan(req)


def test_the_double_raises_what_tensorrts_bindings_raise(trt10, variants) -> None:
    """pybind11 maps TensorRT's C++ errors to RuntimeError (python/src/infer/pyCore.cpp) and
    arguments it cannot convert to TypeError."""
    import tensorrt as trt

    profile = trt.Builder(trt.Logger()).create_optimization_profile()
    with pytest.raises(RuntimeError, match=r"^Shape provided for opt is inconsistent with other shapes\.$"):
        profile.set_shape("input", trt.Dims([1, 3, 8, 8]), trt.Dims([1, 3, 4, 4]), trt.Dims([1, 3, 8, 8]))
    with pytest.raises(RuntimeError, match="Shape provided for min"):
        profile.set_shape("input", trt.Dims([-1, 3, 8, 8]), trt.Dims([1, 3, 8, 8]), trt.Dims([1, 3, 8, 8]))
    with pytest.raises(RuntimeError, match="Shape provided for max"):
        profile.set_shape("input", trt.Dims([1, 3, 8, 8]), trt.Dims([2, 3, 8, 8]), trt.Dims([1, 3, 8, 8]))
    with pytest.raises(TypeError):
        profile.set_shape("input", [1.5, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8])
    assert profile.get_shape("input") == []  # nothing set: an empty list, not a KeyError
    engine = trt.ICudaEngine(
        {"onnx": str(variants[Precision.FP32]), "inputs": {"input": [-1, 3, -1, -1]}, "profiles": []}
    )
    assert engine.get_tensor_mode("nothing") == trt.TensorIOMode.NONE
    with pytest.raises(RuntimeError, match="Error in set optimization profile async"):
        engine.create_execution_context().set_optimization_profile_async(1, 0)


def test_a_profile_that_does_not_fit_the_network_is_refused(trt10, tmp_path, variants) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10)
    req.profiles[0] = [InputRange("input", (1, 4, 4, 4), (4, 4, 8, 8), (16, 4, 16, 16))]  # 4 channels, not 3
    with pytest.raises(
        EngineBuildError,
        match=r"profiles\[0\]: 'input' min \[1, 4, 4, 4\] does not fit the network's input shape "
        r"\[-1, 3, -1, -1\]",
    ):
        build_plan(req)
    assert trt10.named("build_serialized_network") == []


def test_tensorrt_refuses_a_misfit_profile_when_building_not_when_adding_it(trt10, variants) -> None:
    import tensorrt as trt

    builder = trt.Builder(trt.Logger())
    network = builder.create_network(0)
    assert trt.OnnxParser(network, trt.Logger()).parse_from_file(str(variants[Precision.FP32]))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("input", trt.Dims([1, 4, 4, 4]), trt.Dims([4, 4, 8, 8]), trt.Dims([16, 4, 16, 16]))
    assert config.add_optimization_profile(profile) == 0
    assert builder.build_serialized_network(network, config) is None
    assert "optimization profile 0 is invalid for the network" in trt10.named("error")[0][0]


def test_tensorrt_builds_no_engine_of_a_dynamic_network_without_a_profile(trt10, variants) -> None:
    import tensorrt as trt

    builder = trt.Builder(trt.Logger())
    network = builder.create_network(0)
    assert trt.OnnxParser(network, trt.Logger()).parse_from_file(str(variants[Precision.FP32]))
    assert builder.build_serialized_network(network, builder.create_builder_config()) is None
    assert "no optimization profile" in trt10.named("error")[0][0]


def test_same_compute_capability_on_10_8_says_it_is_unavailable(trt108, tmp_path, variants) -> None:
    req = _request(tmp_path, variants, Precision.FP32, 10, hardware_compatibility="same_compute_capability")
    with pytest.raises(
        EngineBuildError,
        match=r"TensorRT 10\.8\.0\.43 has no HardwareCompatibilityLevel\.SAME_COMPUTE_CAPABILITY; "
        r"it has NONE, AMPERE_PLUS",
    ):
        build_plan(req)


def test_the_parser_refuses_int32_quantized_biases_and_takes_the_tensorrt_int8_variant(
    trt10, tmp_path, variants
) -> None:
    from builder.stages.quantize import TENSORRT_INT8, quantize_int8
    from tests.builder.stages.test_quantize import conv_net, samples, spec

    fp32 = conv_net(tmp_path / "net.onnx")
    ort_default = quantize_int8(spec(), fp32, samples(), tmp_path / "cpu").onnx
    for_tensorrt = quantize_int8(spec(), fp32, samples(), tmp_path / "trt", TENSORRT_INT8).onnx
    req = _request(tmp_path, variants, Precision.INT8, 10)
    req.onnx, req.profiles = (
        str(ort_default),
        [[InputRange("input", (1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))]],
    )
    with pytest.raises(EngineBuildError, match=r"node '.*' \(DequantizeLinear\): input 0 '.*' is INT32"):
        build_plan(req)
    req.onnx = str(for_tensorrt)
    assert build_plan(req).startswith(b"PLAN-DOUBLE")
