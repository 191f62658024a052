"""SmoothQuant-style smoothing keeps FP32 outputs and flattens per-channel activation outliers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.stages.smoothing import smooth_matmul_inputs


def _model(path: Path) -> Path:
    """X -> Relu -> two MatMuls sharing their input (like Q/K), plus one more MatMul."""
    rng = np.random.default_rng(0)
    w1, w2, w3 = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3))
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="act"),
        helper.make_node("MatMul", ["h", "w1"], ["y1"], name="layer/q/MatMul"),
        helper.make_node("MatMul", ["h", "w2"], ["y2"], name="layer/k/MatMul"),
        helper.make_node("MatMul", ["x", "w3"], ["y3"], name="layer/out/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 4]) for n in ("y1", "y2", "y3")],
        [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


def _samples(n: int = 32) -> dict[str, np.ndarray]:
    x = np.random.default_rng(1).standard_normal((n, 8)).astype(np.float32)
    x[:, 3] *= 100.0  # an outlier channel
    return {"x": x}


def _run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_outputs_unchanged_and_outliers_flattened(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    samples = _samples()
    dst = smooth_matmul_inputs(src, tmp_path / "s.onnx", samples, alpha=0.5)
    for a, b in zip(_run(src, samples["x"]), _run(dst, samples["x"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)
    graph = onnx.load(str(dst)).graph
    muls = [n for n in graph.node if n.op_type == "Mul"]
    assert len(muls) == 2  # one per smoothed tensor, shared by the MatMuls reading it
    matmuls = [n for n in graph.node if n.op_type == "MatMul"]
    assert all(n.input[0].endswith("_smoothed") and n.input[1].endswith("_smoothed") for n in matmuls)
    assert {i.name for i in graph.initializer} >= {"w1_smoothed", "w2_smoothed", "w3_smoothed"}
    assert not {i.name for i in graph.initializer} & {"w1", "w2", "w3"}
    inv = numpy_helper.to_array(next(i for i in graph.initializer if i.name == muls[1].input[1]))
    assert inv[3] < inv[[0, 1, 2, 4]].min()  # the outlier channel is scaled down most


def test_patterns_select_nodes(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    dst = smooth_matmul_inputs(src, tmp_path / "s.onnx", _samples(), nodes=["*/out/MatMul"])
    graph = onnx.load(str(dst)).graph
    assert [n.name for n in graph.node if n.op_type == "Mul"] == ["x_Smooth"]
    with pytest.raises(ValueError, match="no MatMul"):
        smooth_matmul_inputs(src, tmp_path / "t.onnx", _samples(), nodes=["nothing*"])
