"""A graph that is quantized already is told apart from a float one: by its quantized operators, or
by weights stored as integers and dequantized on their way into the computation (weight-only
quantization), and not by an integer tensor used as a shape, indices, a table or a mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.stages.quantized import quantized_ops
from tests.builder.fixtures.foreign_onnx import weight_only_int8_graph


def graph(path: Path, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], opsets: int = 17) -> Path:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        inits,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opsets)]), path)
    return path


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def cast(source: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Cast", [source], [out], to=TensorProto.FLOAT)


def test_q_dq_nodes_are_counted_and_a_float_graph_has_none(tmp_path: Path) -> None:
    scale, zero = numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    assert quantized_ops(graph(tmp_path / "q.onnx", nodes, [scale, zero])) == {
        "DequantizeLinear": 1,
        "QuantizeLinear": 1,
    }
    assert quantized_ops(graph(tmp_path / "f.onnx", [helper.make_node("Relu", ["x"], ["y"])], [])) == {}


def test_int8_weights_through_cast_and_mul_are_counted(tmp_path: Path) -> None:
    """The third-party MiniLM's form: int8 initializers, Cast, Mul by a scale, MatMul."""
    path = tmp_path / "w.onnx"
    onnx.save(weight_only_int8_graph(), path)
    assert quantized_ops(path) == {"int8 weights through Cast": 2}


def test_a_zero_point_a_transpose_a_constant_node_and_a_scale_after_the_product_count(
    tmp_path: Path,
) -> None:
    w = np.arange(16, dtype=np.uint8).reshape(4, 4)
    nodes = [
        helper.make_node("Constant", [], ["w"], value=init("w_value", w)),
        cast("w", "wf"),
        helper.make_node("Sub", ["wf", "zp"], ["wz"]),
        helper.make_node("Mul", ["wz", "s"], ["wd"]),
        helper.make_node("Transpose", ["wd"], ["wt"]),
        helper.make_node("Gemm", ["x", "wt"], ["h"]),
        cast("v", "vf"),  # int4 weights scaled after the product
        helper.make_node("MatMul", ["h", "vf"], ["p"]),
        helper.make_node("Mul", ["p", "s"], ["y"]),
    ]
    zp, s = init("zp", np.float32(8.0)), init("s", np.float32(0.1))
    v = helper.make_tensor("v", TensorProto.INT4, [4, 4], np.zeros(16, np.int8).tolist())
    assert quantized_ops(graph(tmp_path / "g.onnx", nodes, [zp, s, v], opsets=21)) == {
        "int4 weights through Cast": 1,
        "uint8 weights through Cast": 1,
    }


def test_contrib_weight_only_operators_are_counted(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMulNBits", ["x", "b", "scales"], ["y"], domain="com.microsoft",
                              K=4, N=4, bits=4, block_size=16)]  # fmt: skip
    inits = [init("b", np.zeros((4, 1, 8), np.uint8)), init("scales", np.ones(4, np.float32))]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets), tmp_path / "n.onnx")
    assert quantized_ops(tmp_path / "n.onnx") == {"MatMulNBits": 1}


def test_integer_tensors_used_otherwise_do_not_count(tmp_path: Path) -> None:
    """A shape, a uint8 table gathered from as it is, indices, a uint8 mask cast and added to
    scores, an int8 tensor cast and scaled but only added: none is a quantized weight."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Gather", ["table", "idx"], ["rows"]),  # uint8 data, int64 indices
        cast("rows", "rows_f"),
        helper.make_node("Add", ["r", "rows_f"], ["a"]),
        cast("mask", "mask_f"),
        helper.make_node("Mul", ["mask_f", "big"], ["bias"]),
        helper.make_node("Add", ["a", "bias"], ["b"]),
        cast("offsets", "offsets_f"),
        helper.make_node("Mul", ["offsets_f", "s"], ["o"]),
        helper.make_node("Add", ["b", "o"], ["y"]),
    ]
    inits = [
        init("shape", np.array([-1, 4], np.int64)),
        init("table", np.arange(16, dtype=np.uint8).reshape(4, 4)),
        init("idx", np.array([0], np.int64)),
        init("mask", np.ones((1, 4), np.uint8)),
        init("big", np.float32(-1e4)),
        init("offsets", np.ones((1, 4), np.int8)),
        init("s", np.float32(0.5)),
    ]
    assert quantized_ops(graph(tmp_path / "f.onnx", nodes, inits)) == {}
