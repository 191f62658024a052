"""A graph that is quantized already is told apart from a float one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.stages.quantized import quantized_ops


def graph(path: Path, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> Path:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        inits,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


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
