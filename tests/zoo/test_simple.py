"""zoo.simple: Triton's ``simple`` example signature, built as real ONNX and run in ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from builder.sources import export
from builder.spec import load_spec
from builder.stages.check import check
from zoo.simple import build, evaluation_samples

SPEC = Path(__file__).resolve().parents[2] / "models.yaml"


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_signature_matches_tritons_simple_model() -> None:
    model = build()
    onnx.checker.check_model(model, full_check=True)
    graph = model.graph
    assert [v.name for v in graph.input] == ["INPUT0", "INPUT1"]
    assert [v.name for v in graph.output] == ["OUTPUT0", "OUTPUT1"]
    for value in [*graph.input, *graph.output]:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT32
        assert _dims(value) == ["batch", 16]


def test_outputs_are_sum_and_difference_at_any_batch() -> None:
    session = ort.InferenceSession(build().SerializeToString(), providers=["CPUExecutionProvider"])
    samples = evaluation_samples(None)
    for batch in (1, 5, 64):
        a, b = samples["INPUT0"][:batch], samples["INPUT1"][:batch]
        out0, out1 = session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)


def test_evaluation_samples_are_fixed_int32() -> None:
    first, second = evaluation_samples(None), evaluation_samples(None)
    assert set(first) == {"INPUT0", "INPUT1"}
    for name, array in first.items():
        assert array.dtype == np.int32
        assert array.shape[1:] == (16,) and array.shape[0] >= 8
        np.testing.assert_array_equal(array, second[name])
    assert not np.array_equal(first["INPUT0"], first["INPUT1"])


def test_default_spec_agrees_with_the_graph(tmp_path: Path) -> None:
    model = load_spec(SPEC).model("simple")
    exported = export(model, spec_dir=SPEC.parent, spec_file=SPEC, out=tmp_path / "simple.onnx")
    checked = check(model, exported, tmp_path / "checked.onnx", spec_file=SPEC)
    graph = onnx.load(checked).graph
    assert [n.op_type for n in graph.node] == ["Add", "Sub"]
    assert _dims(graph.input[0]) == ["batch", 16]
