"""builder.stages.graph_tensors: one spec tensor against one graph tensor, the first disagreement named."""

from __future__ import annotations

from typing import Any

import pytest
from onnx import TensorProto, helper

from builder.spec import ModelSpec, TensorSpec
from builder.stages.graph_tensors import tensor_problem

X = TensorSpec.model_validate({"name": "x", "dtype": "FP32", "dims": [3, 4]})


def model(max_batch_size: int) -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "m", "source": "m.onnx", "inputs": [X.model_dump(mode="json")],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [3, 4]}], "max_batch_size": max_batch_size,
        "tolerances": {"fp32": {"max_abs": 0.0}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("max_batch_size", "elem", "shape", "problem"),
    [
        (8, TensorProto.FLOAT, ["B", 3, 4], None),
        (0, TensorProto.FLOAT, [3, 4], None),
        (8, TensorProto.FLOAT, ["B", 3, "w"], None),  # a dynamic dim agrees with any size
        (8, TensorProto.INT64, ["B", 3, 4], ("dtype", "graph says INT64, spec says FP32")),
        (
            8,
            TensorProto.FLOAT,
            [3, 4],
            ("dims", "graph shape [3, 4] has rank 2, spec dims [3, 4] give rank 3"),
        ),
        (8, TensorProto.FLOAT, [1, 3, 4], ("max_batch_size", "graph fixes the batch dim of 'x' to 1")),
        (
            8,
            TensorProto.FLOAT,
            ["B", 3, 5],
            ("dims", "axis 1 (graph shape [B, 3, 5]): graph says 5, spec says 4"),
        ),
    ],
)
def test_the_first_disagreement_is_named_with_its_field(
    max_batch_size: int, elem: int, shape: list[Any], problem: tuple[str, str] | None
) -> None:
    found = tensor_problem(model(max_batch_size), X, helper.make_tensor_value_info("x", elem, shape))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found[0] == problem[0] and found[1].startswith(problem[1]), found


def test_a_graph_tensor_without_a_shape_cannot_be_checked() -> None:
    found = tensor_problem(model(8), X, helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    assert found == ("dims", "graph gives 'x' no shape; cannot check dims [3, 4]")
