from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from builder.errors import ModelRefused, SpecError
from builder.host import cpu_has_vnni
from builder.spec import ModelSpec
from builder.stages import quantize
from builder.stages.quantize import (
    LOG_FILE,
    TENSORRT_INT8,
    Int8Recipe,
    int8_recipe,
    quantize_int8,
    quantize_int8_dynamic,
    tensorrt_qdq_problems,
)

RNG = np.random.default_rng(0)
WITH_TABLE = Int8Recipe(calibration_table=True)


def conv_net(path: Path, batch: bool = True) -> Path:
    """input [N,3,8,8] -> Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> [N,5]."""
    n: int | str = "N" if batch else 1
    rng = np.random.default_rng(0)  # the same weights in every test, whatever ran before
    weights = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)),
        "b1": rng.normal(0, 0.1, (8,)),
        "w2": rng.normal(0, 0.2, (8, 8, 3, 3)),
        "b2": rng.normal(0, 0.1, (8,)),
        "wf": rng.normal(0, 0.3, (5, 8)),
        "bf": rng.normal(0, 0.1, (5,)),
    }
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [n, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [n, 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # onnx writes a newer IR than ONNX Runtime reads
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def spec(
    max_batch_size: int = 4,
    dims: list[int] | None = None,
    out_dims: list[int] | None = None,
    **calibration: Any,
) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "net",
            "source": "zoo.net:build",
            "inputs": [{"name": "input", "dtype": "FP32", "dims": dims or [3, 8, 8]}],
            "outputs": [{"name": "logits", "dtype": "FP32", "dims": out_dims or [5]}],
            "max_batch_size": max_batch_size,
            "precisions": ["fp32", "int8"],
            "calibration": {"data": "calib.npz", **calibration},
            "evaluation": {"data": "eval.npz"},
            "tolerances": {"fp32": {"min_cosine": 0.99}, "int8": {"min_cosine": 0.9}},
        }
    )


def samples(n: int = 24) -> dict[str, np.ndarray]:
    return {"input": RNG.standard_normal((n, 3, 8, 8)).astype(np.float32)}


def run(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return float(np.min(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def activation_quantizers(path: Path) -> dict[str, onnx.NodeProto]:
    graph = onnx.load(str(path)).graph
    inits = {i.name for i in graph.initializer}
    return {n.input[0]: n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits}


def initializer(path: Path, name: str) -> np.ndarray:
    graph = onnx.load(str(path)).graph
    return next(numpy_helper.to_array(i) for i in graph.initializer if i.name == name)


def table(path: Path) -> dict[str, float]:
    lines = path.read_text().splitlines()
    assert lines[0] == "TRT-0-EntropyCalibration2"  # the engine builder writes the running TensorRT's
    pairs = (line.split(": ") for line in lines[1:])
    return {k: struct.unpack(">f", bytes.fromhex(v))[0] for k, v in pairs}


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_static_int8_is_symmetric_qdq_and_accurate(tmp_path: Path, method: str) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    out = tmp_path / "out"
    result = quantize_int8(spec(method=method), fp32, samples(), out)
    made = sorted(p.name for p in out.iterdir() if p.name != LOG_FILE)  # the log holds ORT's own output
    assert made == [result.onnx.name] and result.calibration_table is None
    quantizers = activation_quantizers(result.onnx)
    assert {"input", "r1", "f"} <= set(quantizers)
    for node in quantizers.values():  # TensorRT needs int8 zero points of 0
        zero_point = initializer(result.onnx, node.input[2])
        assert zero_point.dtype == np.int8 and not zero_point.any()
    x = samples(16)["input"]
    assert min_cosine(run(fp32, x), run(result.onnx, x)) > 0.98


def test_calibration_table_matches_model_scales(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    result = quantize_int8(spec(), fp32, samples(), tmp_path / "out", WITH_TABLE)
    assert result.calibration_table is not None
    scales = table(result.calibration_table)
    assert set(scales) == {"input", "c1", "r1", "c2", "r2", "p", "f", "logits"}  # the FP32 graph's
    quantized = {k: v for k, v in activation_quantizers(result.onnx).items() if k in scales}
    assert {"input", "r1", "f"} <= set(quantized)
    for name, node in quantized.items():
        assert scales[name] == pytest.approx(float(initializer(result.onnx, node.input[1])), rel=1e-6)


def test_entropy_and_percentile_clip_where_minmax_does_not(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    data = samples(48)
    data["input"][-1, 0, 0, 0] = 9.0  # the max is in the second calibration pass (32 samples a pass)

    def input_scale(name: str, **calibration: Any) -> float:
        result = quantize_int8(spec(**calibration), fp32, data, tmp_path / name, WITH_TABLE)
        assert result.calibration_table is not None
        return table(result.calibration_table)["input"]

    minmax = input_scale("minmax", method="minmax")
    assert minmax == pytest.approx(9.0 / 127, rel=1e-5)
    assert input_scale("entropy", method="entropy") < minmax * 0.99
    # the spec's percentile is used: 99% of |x| for a standard normal is about 2.58
    p99 = input_scale("p99", method="percentile", percentile=99.0) * 127
    assert p99 == pytest.approx(float(np.percentile(np.abs(data["input"]), 99.0)), rel=0.05)


def test_per_tensor_weights_when_per_channel_is_off(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    per_channel = quantize_int8(spec(per_channel=True), fp32, samples(), tmp_path / "pc").onnx
    per_tensor = quantize_int8(spec(per_channel=False), fp32, samples(), tmp_path / "pt").onnx

    def weight_scale_sizes(path: Path) -> list[int]:
        graph = onnx.load(str(path)).graph
        dq = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("w1")]
        return [initializer(path, n.input[1]).size for n in dq]

    assert weight_scale_sizes(per_channel) == [8]
    assert weight_scale_sizes(per_tensor) == [1]


def test_excluded_nodes_stay_float(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    result = quantize_int8(
        spec(exclude_nodes=["fc"], exclude_op_types=["GlobalAveragePool"]), fp32, samples(), tmp_path / "o"
    )
    graph = onnx.load(str(result.onnx)).graph
    fc = next(n for n in graph.node if n.name == "fc")
    assert "wf" in fc.input  # float weight, not a DequantizeLinear output
    assert "f" not in activation_quantizers(result.onnx)
    assert "r1" in activation_quantizers(result.onnx)


def test_op_types_calibrate_only_their_tensors_to_the_same_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calibrating only the tensors of the op types quantized (quantize_static's own choice; the
    zoo's MiniLM: 14 s instead of 24 s) gives the graph that every tensor's ranges give."""
    fp32, data, model = conv_net(tmp_path / "fp32.onnx"), samples(), spec(op_types=["Conv"])
    seen: list[list[str] | None] = []
    collect = quantize._collect

    def every_tensor(*args: Any) -> Any:
        seen.append(args[-1])
        return collect(*args[:-1], None)

    narrow = quantize_int8(model, fp32, data, tmp_path / "narrow").onnx.read_bytes()
    monkeypatch.setattr(quantize, "_collect", every_tensor)
    assert quantize_int8(model, fp32, data, tmp_path / "every").onnx.read_bytes() == narrow
    assert seen == [["Conv"]]


def test_unknown_excluded_node_is_a_spec_error(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    with pytest.raises(SpecError) as info:
        quantize_int8(spec(exclude_nodes=["nope"]), fp32, samples(), tmp_path / "o")
    assert info.value.field == "calibration.exclude_nodes"


def test_weights_only_result_is_refused(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    with pytest.raises(ModelRefused, match="no QuantizeLinear/DequantizeLinear on activations"):
        quantize_int8(spec(op_types=["MatMul"]), fp32, samples(), tmp_path / "o")
    assert list((tmp_path / "o").iterdir()) == []  # temp folder cleaned up, nothing half-written


def test_model_without_batch_axis_calibrates_per_sample(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx", batch=False)
    data = {"input": samples(8)["input"][:, np.newaxis]}  # samples of the [1, 3, 8, 8] input
    result = quantize_int8(spec(max_batch_size=0, dims=[1, 3, 8, 8]), fp32, data, tmp_path / "o")
    x = data["input"][0]
    assert min_cosine(run(fp32, x), run(result.onnx, x)) > 0.98


def test_dynamic_int8_quantizes_and_runs(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    out = quantize_int8_dynamic(spec(), fp32, tmp_path / "o")
    assert [p.name for p in (tmp_path / "o").iterdir()] == [out.name]
    graph = onnx.load(str(out)).graph
    ops = {n.op_type for n in graph.node}
    assert "DynamicQuantizeLinear" in ops
    assert ops & {"ConvInteger", "MatMulInteger"}
    x = samples(16)["input"]
    assert min_cosine(run(fp32, x), run(out, x)) > 0.98


def dequantized_types(path: Path) -> dict[str, str]:
    """Quantized initializer -> its element type, for every DequantizeLinear of an initializer."""
    graph = onnx.load(str(path)).graph
    inits = {i.name: i.data_type for i in graph.initializer}
    return {
        n.input[0]: TensorProto.DataType.Name(inits[n.input[0]])
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits
    }


def test_onnx_runtime_default_quantizes_biases_to_int32_which_the_tensorrt_check_refuses(
    tmp_path: Path,
) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    cpu = quantize_int8(spec(), fp32, samples(), tmp_path / "cpu").onnx
    assert "INT32" in dequantized_types(cpu).values()  # ORT's QuantizeBias=True: fused CPU kernels
    problems = tensorrt_qdq_problems(onnx.load(str(cpu)).graph)
    assert problems and "dequantizes INT32" in problems[0]
    refused = r"TensorRT cannot parse this Q/DQ graph: DequantizeLinear .* INT32"
    with pytest.raises(ModelRefused, match=refused):
        quantize_int8(spec(), fp32, samples(), tmp_path / "o", Int8Recipe(for_tensorrt=True))


def test_the_tensorrt_int8_variant_keeps_biases_float_and_stays_accurate(tmp_path: Path) -> None:
    assert int8_recipe(True) == TENSORRT_INT8 and int8_recipe(False) == Int8Recipe(
        reduce_range=not cpu_has_vnni()
    )
    fp32 = conv_net(tmp_path / "fp32.onnx")
    result = quantize_int8(spec(), fp32, samples(), tmp_path / "trt", TENSORRT_INT8)
    types = dequantized_types(result.onnx)
    assert set(types.values()) == {"INT8"} and {"w1", "w2", "wf"} <= {n.split("_")[0] for n in types}
    assert tensorrt_qdq_problems(onnx.load(str(result.onnx)).graph) == []
    graph = onnx.load(str(result.onnx)).graph
    conv1 = next(n for n in graph.node if n.name == "conv1")
    assert conv1.input[2] == "b1"  # the float bias itself, no DequantizeLinear in between
    x = samples(16)["input"]
    assert min_cosine(run(fp32, x), run(result.onnx, x)) > 0.98


def bn_net(path: Path) -> Path:
    """input -> Conv -> BatchNormalization -> Identity -> Relu -> logits: ORT's pre-processing
    folds the BatchNormalization and drops the Identity, so its graph has other tensors."""
    inits = {
        "w": RNG.normal(0, 0.3, (4, 3, 3, 3)),
        "scale": RNG.uniform(0.5, 2, 4),
        "bias": RNG.normal(0, 0.1, 4),
        "mean": RNG.normal(0, 0.1, 4),
        "var": RNG.uniform(0.5, 2, 4),
    }
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
        helper.make_node("Identity", ["bn"], ["same"], name="identity"),
        helper.make_node("Relu", ["same"], ["logits"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "bn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def activations(path: Path) -> set[str]:
    graph = onnx.load(str(path)).graph
    return {i.name for i in graph.input} | {o for n in graph.node for o in n.output}


def test_the_tensorrt_table_names_the_tensors_of_the_graph_tensorrt_parses(tmp_path: Path) -> None:
    fp32 = bn_net(tmp_path / "fp32.onnx")
    result = quantize_int8(spec(out_dims=[4, 8, 8]), fp32, samples(), tmp_path / "o", WITH_TABLE)
    assert result.calibration_table is not None
    assert set(table(result.calibration_table)) == activations(fp32) == {"input", "c", "bn", "same", "logits"}


def test_a_smoothed_source_gets_the_table_of_the_unsmoothed_graph(tmp_path: Path) -> None:
    fp32 = conv_net(tmp_path / "fp32.onnx")
    doubled = onnx.load(str(fp32))  # stands in for a smoothed graph: other tensors, other ranges
    doubled.graph.node.insert(0, helper.make_node("Add", ["input", "input"], ["input2"], name="double"))
    doubled.graph.node[1].input[0] = "input2"
    onnx.save(doubled, str(tmp_path / "smoothed.onnx"))
    data = samples()
    result = quantize_int8(spec(), tmp_path / "smoothed.onnx", data, tmp_path / "o", WITH_TABLE, fp32)
    assert result.calibration_table is not None
    scales = table(result.calibration_table)
    assert set(scales) == activations(fp32)
    assert scales["input"] == pytest.approx(float(np.abs(data["input"]).max()) / 127, rel=1e-5)


def test_below_opset_13_the_graph_is_converted_for_per_channel_or_else_quantized_per_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnx import version_converter

    from builder.spec import load_spec
    from builder.stages.check import graph_opset
    from tests.builder.fixtures import foreign_onnx

    fp32 = foreign_onnx.save(foreign_onnx.conv_graph(12), tmp_path / "conv.onnx")
    np.savez(tmp_path / "cal.npz", x=RNG.standard_normal((8, 3, 16, 16)).astype(np.float32))
    entry = {
        "name": "conv",
        "source": "conv.onnx",
        "precisions": ["fp32", "int8"],
        "calibration": {"data": "cal.npz"},
    }
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    model = load_spec(tmp_path / "models.yaml").models[0]
    data = {"x": np.load(tmp_path / "cal.npz")["x"]}

    def weight_scale_sizes(path: Path) -> list[int]:
        dq = [n for n in onnx.load(str(path)).graph.node if n.op_type == "DequantizeLinear"]
        return [initializer(path, n.input[1]).size for n in dq if n.input[0].startswith("conv1.w_0")]

    converted = quantize_int8(model, fp32, data, tmp_path / "converted")
    assert converted.note == "opset 12 converted to 13 for per-channel Q/DQ"
    assert graph_opset(converted.onnx) == 13 and weight_scale_sizes(converted.onnx) == [8]
    ort.InferenceSession(str(converted.onnx), providers=["CPUExecutionProvider"])

    def no_adapter(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
        raise RuntimeError("No Adapter For Conv")

    monkeypatch.setattr(version_converter, "convert_version", no_adapter)
    per_tensor = quantize_int8(model, fp32, data, tmp_path / "per_tensor")
    assert (
        per_tensor.note == "opset 12 could not be converted to 13 (No Adapter For Conv): quantized per tensor"
    )
    assert graph_opset(per_tensor.onnx) == 12 and weight_scale_sizes(per_tensor.onnx) == [1]
    ort.InferenceSession(str(per_tensor.onnx), providers=["CPUExecutionProvider"])


def test_one_calibration_pass_gives_every_searched_methods_ranges(tmp_path: Path) -> None:
    from builder.stages.quantize import Calibrated, Int8Config, calibrate_int8, quantize_config, ranges_file

    fp32 = conv_net(tmp_path / "fp32.onnx")
    model = spec(method="percentile")
    calibrated = calibrate_int8(model, fp32, samples(), tmp_path / "ranges", candidates=True)
    assert calibrated.candidates[0] == ("percentile 99.999", True)  # the spec's method first
    methods = {m for m, _ in calibrated.candidates} | {a.rsplit(" ", 1)[0] for a, _ in calibrated.same_as}
    assert {"minmax", "percentile 99.99", "percentile 99.9", "entropy", "distribution"} <= methods
    # distribution's INT8 ranges are minmax's (here, with 24 samples, percentile 99.999's too): kept
    # once, and said so
    same = dict(calibrated.same_as)
    assert same["distribution asymmetric"] == "minmax asymmetric"
    assert same["distribution symmetric"] in {"minmax symmetric", same.get("minmax symmetric")}
    for method, symmetric in calibrated.candidates:
        assert (tmp_path / "ranges" / ranges_file(method, symmetric)).is_file()
    again = Calibrated.read(tmp_path / "ranges", fp32, calibrated.to_info())
    assert again.candidates == calibrated.candidates and again.same_as == calibrated.same_as
    asymmetric = quantize_config(
        model, again, tmp_path / "asym.onnx", Int8Recipe(), Int8Config("percentile 99.99", symmetric=False)
    )
    zero_points = [initializer(asymmetric, n.input[2]) for n in activation_quantizers(asymmetric).values()]
    assert all(z.dtype == np.uint8 for z in zero_points) and any(z.any() for z in zero_points)
    kept = quantize_config(
        model, again, tmp_path / "kept.onnx", Int8Recipe(), Int8Config("minmax").with_float(("fc",))
    )
    gemm = next(n for n in onnx.load(str(kept)).graph.node if n.name == "fc")
    assert gemm.input[1] == "wf"  # the Gemm in float reads its float weight
    x = samples(8)["input"]
    assert min_cosine(run(fp32, x), run(asymmetric, x)) > 0.98


def test_wider_percentiles_clip_less() -> None:
    from onnxruntime.quantization.calibrate import HistogramCollector

    from builder.stages.quantize import HISTOGRAM_BINS, _range

    values = np.concatenate([RNG.standard_normal(100_000), [40.0, -30.0]]).astype(np.float32)
    collector = HistogramCollector("entropy", False, HISTOGRAM_BINS, 128, 99.999, "same")
    collector.collect_value({"t": [values]})
    histogram = collector.histogram_dict["t"]
    widths = []
    for method in ("percentile 99.9", "percentile 99.99", "percentile 99.999", "minmax"):
        lo, hi = _range(method, True, histogram, HistogramCollector, {}, "t")
        assert float(lo) == -float(hi) or method == "minmax"
        widths.append(float(hi))
    assert widths == sorted(widths) and widths[-1] == pytest.approx(40.0)
    lo, hi = _range("percentile 99.99", False, histogram, HistogramCollector, {}, "t")
    assert -5 < float(lo) < -3 and 3 < float(hi) < 5  # both tails cut
    assert 2.0 < float(_range("entropy", True, histogram, HistogramCollector, {}, "t")[1]) < 40.0


class _PassShapes:
    """A calibrator that records the batch shapes of each pass (ONNX Runtime's histogram collectors
    stack a pass's outputs, so a pass of two shapes fails there)."""

    def __init__(self) -> None:
        self.passes: list[set[tuple[int, ...]]] = []
        self.rows = 0

    def collect_data(self, reader: quantize.SampleReader) -> None:
        shapes = set()
        while (batch := reader.get_next()) is not None:
            shapes.add(batch["x"].shape)
            self.rows += batch["x"].shape[0] if batch["x"].ndim == 2 else 1
        self.passes.append(shapes)


@pytest.mark.parametrize(("count", "batch"), [(13, 4), (16, 4), (3, 8), (5, 0)])
def test_each_calibration_pass_feeds_batches_of_one_shape(count: int, batch: int) -> None:
    calibrator = _PassShapes()
    quantize._feed(calibrator, {"x": np.zeros((count, 2), np.float32)}, batch)
    assert all(len(shapes) == 1 for shapes in calibrator.passes), calibrator.passes
    assert calibrator.rows == count  # every sample, once
