"""A graph's rank-0 inputs and outputs served as [1]: same answers, through ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from builder.spec import ModelSpec
from builder.stages.scalars import as_vectors, scalar_names
from tests.builder.fixtures import foreign_onnx as f


def _spec(**fields: object) -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "m", "source": "m.onnx", "tolerances": {"fp32": {"max_abs": 0.0}}, **fields,
    })  # fmt: skip


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in sess.run(None, feed)]


def test_a_rank_0_input_takes_one_element_and_answers_as_before() -> None:
    graph = f.scalar_input_graph()
    spec = _spec(
        inputs=[
            {"name": "x", "dtype": "FP32", "dims": [-1, 16]},
            {"name": "sr", "dtype": "INT64", "dims": [1]},
        ],
        outputs=[{"name": "y", "dtype": "FP32", "dims": [-1, 16]}],
        profiles=[{"shapes": {"x": {"min": [1, 16], "opt": [2, 16], "max": [4, 16]}}}],
    )
    assert scalar_names(spec, graph) == {"sr"}
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    before = _run(graph, {"x": x, "sr": np.array(8000, np.int64)})
    served = as_vectors(onnx.load_from_string(graph.SerializeToString()), {"sr"})
    onnx.checker.check_model(served, full_check=True)
    assert [d.dim_value for d in served.graph.input[1].type.tensor_type.shape.dim] == [1]
    np.testing.assert_array_equal(_run(served, {"x": x, "sr": np.array([8000], np.int64)})[0], before[0])


def test_a_rank_0_output_is_returned_as_one_element() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, [])
    node = helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)
    graph = helper.make_model(
        helper.make_graph([node], "sum", [x], [total]), opset_imports=[helper.make_opsetid("", 13)]
    )
    graph.ir_version = f.IR_VERSION
    spec = _spec(
        inputs=[{"name": "x", "dtype": "FP32", "dims": [3]}],
        outputs=[{"name": "total", "dtype": "FP32", "dims": [1]}],
    )
    served = as_vectors(graph, scalar_names(spec, graph))
    (out,) = _run(served, {"x": np.array([1.0, 2.0, 3.5], np.float32)})
    assert out.shape == (1,) and out[0] == 6.5


def test_a_batching_model_keeps_its_graph() -> None:
    spec = _spec(
        max_batch_size=4,
        inputs=[{"name": "input/ids.0", "dtype": "FP32", "dims": [8]}],
        outputs=[{"name": "/model/out.1", "dtype": "FP32", "dims": [2]}],
    )
    assert scalar_names(spec, f.slashed_names_graph()) == set()
