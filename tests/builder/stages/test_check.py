"""builder.stages.check: the ONNX checker, the graph-vs-spec comparison and onnxsim, on real graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.errors import SpecError
from builder.spec import ModelSpec
from builder.stages.check import check

SPEC_FILE = Path("/project/models.yaml")
Shape = list[int | str]


def _graph(
    inputs: dict[str, tuple[int, Shape]],
    outputs: dict[str, tuple[int, Shape]],
    nodes: list[onnx.NodeProto] | None = None,
    initializers: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    """Identity from each input to the output at the same position unless nodes are given."""
    if nodes is None:
        nodes = [helper.make_node("Identity", [i], [o]) for i, o in zip(inputs, outputs, strict=False)]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializers or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _spec(**override: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "m",
        "source": "m.onnx",
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [3, 4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [3, 4]}],
        "max_batch_size": 8,
        "evaluation": {"data": "samples.npz"},
        "tolerances": {"fp32": {"max_abs": 0.0}},
    }
    return ModelSpec.model_validate(fields | override)


def _check(model: ModelSpec, proto: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    onnx.save(proto, tmp_path / "in.onnx")
    return onnx.load(check(model, tmp_path / "in.onnx", tmp_path / "out.onnx", spec_file=SPEC_FILE))


def _error(model: ModelSpec, proto: onnx.ModelProto, tmp_path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        _check(model, proto, tmp_path)
    assert err.value.file == str(SPEC_FILE) and err.value.model == "m"
    return err.value


FP = TensorProto.FLOAT
GOOD = {"x": (FP, ["batch", 3, 4])}, {"y": (FP, ["batch", 3, 4])}


def _dims(value: onnx.ValueInfoProto) -> Shape:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_a_graph_that_agrees_passes(tmp_path: Path) -> None:
    out = _check(_spec(), _graph(*GOOD), tmp_path)
    assert _dims(out.graph.input[0]) == ["batch", 3, 4]


def test_invalid_onnx_fails_the_checker(tmp_path: Path) -> None:
    broken = _graph(*GOOD, nodes=[helper.make_node("Add", ["x"], ["y"])])
    err = _error(_spec(), broken, tmp_path)
    assert err.field == "source"
    assert err.message.startswith("ONNX checker: ") and "Add" in err.message
    assert "\n" not in err.one_line()


def test_a_file_that_is_not_onnx_fails_the_checker(tmp_path: Path) -> None:
    (tmp_path / "in.onnx").write_bytes(b"definitely not a protobuf \x00\xff")
    with pytest.raises(SpecError) as err:
        check(_spec(), tmp_path / "in.onnx", tmp_path / "out.onnx", spec_file=SPEC_FILE)
    assert err.value.field == "source"


def _same(shape: Shape, dtype: int = FP) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"x": (dtype, shape)}, {"y": (dtype, shape)}


@pytest.mark.parametrize(
    ("graph_io", "override", "field", "words"),
    [
        (({"z": (FP, ["batch", 3, 4])}, GOOD[1]), {}, "inputs[0].name", "no input 'x'"),
        (
            GOOD,
            {"outputs": [{"name": "out", "dtype": "FP32", "dims": [3, 4]}]},
            "outputs[0].name",
            "no output",
        ),
        (
            _same(["batch", 3, 4], TensorProto.INT32),
            {},
            "inputs[0].dtype",
            "graph says INT32, spec says FP32",
        ),
        (_same(["batch", 12]), {}, "inputs[0].dims", "rank 2"),
        (_same(["batch", 3, 5]), {}, "inputs[0].dims", "graph says 5, spec says 4"),
        (GOOD, {"outputs": [{"name": "y", "dtype": "FP32", "dims": [4, 3]}]}, "outputs[0].dims", "says 3"),
        (GOOD, {"outputs": [{"name": "y", "dtype": "FP16", "dims": [3, 4]}]}, "outputs[0].dtype", "FP32"),
        (_same([1, 3, 4]), {}, "max_batch_size", "fixes the batch dim of 'x' to 1"),
    ],
)
def test_each_disagreement_names_the_field(
    tmp_path: Path,
    graph_io: tuple[dict[str, Any], dict[str, Any]],
    override: dict[str, Any],
    field: str,
    words: str,
) -> None:
    err = _error(_spec(**override), _graph(*graph_io), tmp_path)
    assert err.field == field
    assert words in err.message


def test_an_extra_graph_output_is_reported(tmp_path: Path) -> None:
    outputs = {"y": (FP, ["batch", 3, 4]), "extra": (FP, ["batch", 3, 4])}
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["extra"])]
    err = _error(_spec(), _graph(GOOD[0], outputs, nodes=nodes), tmp_path)
    assert err.field == "outputs" and "'extra'" in err.message


def test_an_extra_graph_input_is_reported(tmp_path: Path) -> None:
    inputs = {"x": (FP, ["batch", 3, 4]), "mask": (FP, ["batch", 3, 4])}
    proto = _graph(inputs, GOOD[1], nodes=[helper.make_node("Mul", ["x", "mask"], ["y"])])
    err = _error(_spec(), proto, tmp_path)
    assert err.field == "inputs" and "'mask'" in err.message


def test_dims_that_include_the_batch_dimension_get_a_hint(tmp_path: Path) -> None:
    model = _spec(
        inputs=[{"name": "x", "dtype": "FP32", "dims": [8, 3, 4]}],
        outputs=[{"name": "y", "dtype": "FP32", "dims": [8, 3, 4]}],
    )
    err = _error(model, _graph(*GOOD), tmp_path)
    assert err.field == "inputs[0].dims" and "exclude the batch dimension" in err.message


def test_spec_dynamic_where_the_graph_is_static_is_an_error(tmp_path: Path) -> None:
    model = _spec(
        inputs=[{"name": "x", "dtype": "FP32", "dims": [3, -1]}],
        profiles=[{"shapes": {"x": {"min": [3, 1], "opt": [3, 4], "max": [3, 8]}}}],
    )
    err = _error(model, _graph(*GOOD), tmp_path)
    assert err.field == "inputs[0].dims" and "graph says 4, spec says -1" in err.message


def test_spec_may_fix_a_dim_the_graph_leaves_dynamic(tmp_path: Path) -> None:
    proto = _graph({"x": (FP, ["batch", 3, "n"])}, {"y": (FP, ["batch", 3, "n"])})
    out = _check(_spec(), proto, tmp_path)
    assert _dims(out.graph.input[0]) == ["batch", 3, "n"]


def test_without_batching_the_full_shape_is_compared(tmp_path: Path) -> None:
    model = _spec(max_batch_size=0)
    err = _error(model, _graph(*GOOD), tmp_path)
    assert err.field == "inputs[0].dims" and "max_batch_size 0" in err.message
    _check(model, _graph({"x": (FP, [3, 4])}, {"y": (FP, [3, 4])}), tmp_path)


def _foldable() -> onnx.ModelProto:
    """y = x + (a * b) with a, b constants: onnxsim folds the Mul away."""
    a = numpy_helper.from_array(np.full((3, 4), 2.0, np.float32), "a")
    b = numpy_helper.from_array(np.full((3, 4), 3.0, np.float32), "b")
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["x", "ab"], ["y"])]
    return _graph(*GOOD, nodes=nodes, initializers=[a, b])


def test_simplification_folds_constants_and_keeps_dynamic_axes(tmp_path: Path) -> None:
    out = _check(_spec(), _foldable(), tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Add"]
    assert _dims(out.graph.input[0]) == ["batch", 3, 4]
    assert _dims(out.graph.output[0]) == ["batch", 3, 4]
    session = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.ones((5, 3, 4), np.float32)})
    np.testing.assert_array_equal(y, np.full((5, 3, 4), 7.0, np.float32))


def test_simplify_false_keeps_the_graph(tmp_path: Path) -> None:
    out = _check(_spec(simplify=False), _foldable(), tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Mul", "Add"]


def test_an_ir_3_graph_with_initializers_not_listed_as_inputs_is_read_as_ir_4(tmp_path: Path) -> None:
    """onnxruntime's own mul_1.onnx: IR 3, its weight W an initializer only, which ONNX Runtime runs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    w = numpy_helper.from_array(np.full((3, 4), 2.0, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "mul", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 3
    onnx.save(model, tmp_path / "in.onnx")
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(tmp_path / "in.onnx"))
    out = check(_spec(max_batch_size=0), tmp_path / "in.onnx", tmp_path / "out.onnx", spec_file=SPEC_FILE)
    assert onnx.load(out).ir_version == 4
    onnx.checker.check_model(str(out))
