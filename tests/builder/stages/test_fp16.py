from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.errors import ModelRefused
from builder.stages.fp16 import convert_fp16

RNG = np.random.default_rng(1)


def mlp(path: Path) -> Path:
    """x [N,16] -> MatMul -> Add -> Relu -> MatMul -> Softmax -> y [N,4]; plus an int64 passthrough."""
    inits = [
        numpy_helper.from_array(RNG.normal(0, 0.3, (16, 32)).astype(np.float32), "w1"),
        numpy_helper.from_array(RNG.normal(0, 0.1, (32,)).astype(np.float32), "b1"),
        numpy_helper.from_array(RNG.normal(0, 0.3, (32, 4)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1),
        helper.make_node("Identity", ["ids"], ["ids_out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("ids_out", TensorProto.INT64, ["N", 2]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # onnx writes a newer IR than ONNX Runtime reads
    onnx.save(model, str(path))
    return path


def run(path: Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)


def test_fp16_keeps_fp32_io_and_halves_weights(tmp_path: Path) -> None:
    fp32 = mlp(tmp_path / "fp32.onnx")
    out = convert_fp16(fp32, tmp_path / "v" / "fp16.onnx")
    assert out == tmp_path / "v" / "fp16.onnx"
    assert [p.name for p in out.parent.iterdir()] == ["fp16.onnx"]
    graph = onnx.load(str(out)).graph
    io_types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]}
    assert io_types == {
        "x": TensorProto.FLOAT,
        "ids": TensorProto.INT64,
        "y": TensorProto.FLOAT,
        "ids_out": TensorProto.INT64,
    }
    assert {i.data_type for i in graph.initializer} == {TensorProto.FLOAT16}
    assert out.stat().st_size < 0.7 * fp32.stat().st_size


def test_fp16_outputs_close_to_fp32(tmp_path: Path) -> None:
    fp32 = mlp(tmp_path / "fp32.onnx")
    out = convert_fp16(fp32, tmp_path / "fp16.onnx")
    feed = {"x": RNG.standard_normal((32, 16)).astype(np.float32), "ids": np.arange(64).reshape(32, 2)}
    ref, half = run(fp32, feed), run(out, feed)
    assert half[0].dtype == np.float32
    np.testing.assert_allclose(half[0], ref[0], atol=2e-3)
    np.testing.assert_array_equal(half[1], ref[1])


def test_unloadable_result_is_a_build_error(tmp_path: Path) -> None:
    fp32 = mlp(tmp_path / "fp32.onnx")
    model = onnx.load(str(fp32))
    model.ir_version = 99  # ORT refuses this; the conversion keeps it
    onnx.save(model, str(fp32))
    with pytest.raises(ModelRefused, match="cannot load"):
        convert_fp16(fp32, tmp_path / "fp16.onnx")
    assert not list(tmp_path.glob("fp16.onnx*"))


def test_a_cast_of_an_integer_input_to_float_is_converted_with_its_output(tmp_path: Path) -> None:
    """The converter types Cast(to=FLOAT)'s output FLOAT16 and left ``to`` alone, which ORT refused."""
    from tests.builder.fixtures.foreign_onnx import save, scalar_input_graph

    fp32 = save(scalar_input_graph(), tmp_path / "fp32.onnx")
    half = convert_fp16(fp32, tmp_path / "fp16.onnx")
    feed = {"x": np.linspace(-2, 2, 32, dtype=np.float32).reshape(2, 16), "sr": np.array(8000, np.int64)}
    want, got = (
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feed)[0]
        for p in (fp32, half)
    )
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_an_output_that_other_nodes_also_read_converts_and_runs(tmp_path: Path) -> None:
    """A graph returning ``h`` and ``h * 2`` (a model's hidden states and their pooling): the
    converter's closing Cast of ``h`` to float must not be what the Mul reads."""
    w = numpy_helper.from_array(RNG.normal(0, 0.3, (8, 8)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Mul", ["h", "two"], ["doubled"])],
        "shared_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [
            helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 8]),
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["N", 8]),
        ],
        [w, two],
    )
    src = tmp_path / "shared.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), src)
    out = convert_fp16(src, tmp_path / "half.onnx")
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    h, doubled = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(h, x @ numpy_helper.to_array(w), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(doubled, 2 * h, rtol=1e-2, atol=1e-2)


def test_the_run_check_keeps_onnx_runtime_s_own_lines_off_the_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The check runs dynamic dims as 1, which a graph needing a window of samples refuses: ORT
    raises, and would also print ``[E:onnxruntime...]`` lines, in a stage that succeeds."""
    from tests.builder.fixtures import guessed_shapes
    from tests.builder.fixtures.foreign_onnx import save

    source = save(guessed_shapes.audio_front_end(), tmp_path / "front.onnx")
    capfd.readouterr()
    convert_fp16(source, tmp_path / "fp16" / "model.onnx")
    out, err = capfd.readouterr()
    assert "onnxruntime" not in out + err
    assert (tmp_path / "fp16" / "model.onnx").is_file()
