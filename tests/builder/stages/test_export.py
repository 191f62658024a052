"""builder.stages.export (through builder.sources): sources to one self-contained .onnx, with real torch
and ONNX Runtime."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from builder.errors import SpecError
from builder.sources import export, load_source
from builder.spec import ModelSpec
from builder.stages.check import check
from builder.stages.export import LOG_FILE, torch_reference

FACTORIES = """
import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.seen = []

    def forward(self, x):
        self.seen.append(x.shape[0])
        y = self.conv(x)
        return y, y.mean(dim=2)


def module():
    return Scale()


def relu_onnx():
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def path():
    return "relu.onnx"


def number():
    return 42
"""


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spec")
    (folder / "export_test_factories.py").write_text(textwrap.dedent(FACTORIES))
    onnx.save(_relu_model(), folder / "relu.onnx")
    return folder


def _relu_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _spec(source: str, **override: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "m",
        "source": source,
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [4]}],
        "max_batch_size": 8,
        "evaluation": {"data": "samples.npz"},
        "tolerances": {"fp32": {"max_abs": 0.0}},
    }
    return ModelSpec.model_validate(fields | override)


def _conv_spec(**override: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "inputs": [{"name": "signal", "dtype": "FP32", "dims": [4, -1]}],
        "outputs": [
            {"name": "features", "dtype": "FP32", "dims": [8, -1]},
            {"name": "pooled", "dtype": "FP32", "dims": [8]},
        ],
        "profiles": [{"opt_batch": 2, "shapes": {"signal": {"min": [4, 1], "opt": [4, 10], "max": [4, 64]}}}],
    }
    return _spec("export_test_factories:module", **(fields | override))


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _export(model: ModelSpec, spec_dir: Path, out: Path) -> Path:
    return export(model, spec_dir=spec_dir, spec_file=spec_dir / "models.yaml", out=out)


def test_load_source_kinds(spec_dir: Path) -> None:
    kw = {"spec_dir": spec_dir, "spec_file": spec_dir / "models.yaml"}
    assert type(load_source(_conv_spec(), **kw)).__name__ == "Scale"
    assert isinstance(load_source(_spec("export_test_factories:relu_onnx"), **kw), onnx.ModelProto)
    assert load_source(_spec("export_test_factories:path"), **kw) == spec_dir / "relu.onnx"
    assert load_source(_spec("relu.onnx"), **kw) == spec_dir / "relu.onnx"


@pytest.mark.parametrize("source", ["missing.onnx", "export_test_factories:number", "no_such_module:f"])
def test_bad_sources_name_the_source_field(spec_dir: Path, source: str) -> None:
    with pytest.raises(SpecError) as err:
        load_source(_spec(source), spec_dir=spec_dir, spec_file=spec_dir / "models.yaml")
    assert err.value.field == "source" and err.value.model == "m"
    assert err.value.file == str(spec_dir / "models.yaml")


def test_torch_export_names_dynamic_axes_and_matches_torch(spec_dir: Path, tmp_path: Path) -> None:
    model = _conv_spec()
    out = _export(model, spec_dir, tmp_path / "conv.onnx")
    graph = onnx.load(out).graph
    assert [v.name for v in graph.input] == ["signal"]
    assert [v.name for v in graph.output] == ["features", "pooled"]
    assert _dims(graph.input[0]) == ["batch", 4, "signal_2"]
    assert _dims(graph.output[0]) == ["batch", 8, "features_2"]
    assert _dims(graph.output[1]) == ["batch", 8]
    assert {o.domain: o.version for o in onnx.load(out).opset_import}[""] == 17
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    source = load_source(model, spec_dir=spec_dir, spec_file=spec_dir / "models.yaml")
    rng = np.random.default_rng(1)
    for shape in [(1, 4, 3), (5, 4, 17)]:  # neither is the traced opt shape (2, 4, 10)
        signal = rng.standard_normal(shape).astype(np.float32)
        reference = torch_reference(model, source, {"signal": signal})
        assert reference is not None
        features, pooled = session.run(None, {"signal": signal})
        np.testing.assert_allclose(features, reference["features"], atol=1e-5)
        np.testing.assert_allclose(pooled, reference["pooled"], atol=1e-5)


def test_dynamic_axes_survive_simplification(spec_dir: Path, tmp_path: Path) -> None:
    model = _conv_spec()
    checked = check(
        model,
        _export(model, spec_dir, tmp_path / "conv.onnx"),
        tmp_path / "c.onnx",
        spec_file=spec_dir / "models.yaml",
    )
    graph = onnx.load(checked).graph
    assert _dims(graph.input[0]) == ["batch", 4, "signal_2"]
    assert _dims(graph.output[0]) == ["batch", 8, "features_2"]


def test_torch_export_is_deterministic_and_self_contained(spec_dir: Path, tmp_path: Path) -> None:
    model = _conv_spec(opset=13)
    first = _export(model, spec_dir, tmp_path / "a" / "conv.onnx")
    second = _export(model, spec_dir, tmp_path / "b" / "conv.onnx")
    assert first.read_bytes() == second.read_bytes()
    assert [p.name for p in first.parent.iterdir() if p.name != LOG_FILE] == ["conv.onnx"]
    assert onnx.load(first).opset_import[0].version == 13


def test_without_batching_the_graph_has_no_batch_axis(spec_dir: Path, tmp_path: Path) -> None:
    model = _conv_spec(
        max_batch_size=0,
        inputs=[{"name": "signal", "dtype": "FP32", "dims": [3, 4, 10]}],
        outputs=[
            {"name": "features", "dtype": "FP32", "dims": [3, 8, 10]},
            {"name": "pooled", "dtype": "FP32", "dims": [3, 8]},
        ],
        profiles=[],
    )
    graph = onnx.load(_export(model, spec_dir, tmp_path / "conv.onnx")).graph
    assert _dims(graph.input[0]) == [3, 4, 10]
    assert _dims(graph.output[1]) == [3, 8]


def test_onnx_sources_are_saved_or_copied(spec_dir: Path, tmp_path: Path) -> None:
    saved = _export(_spec("export_test_factories:relu_onnx"), spec_dir, tmp_path / "saved.onnx")
    assert onnx.load(saved).graph.node[0].op_type == "Relu"
    copied = _export(_spec("relu.onnx"), spec_dir, tmp_path / "copied.onnx")
    assert copied.read_bytes() == (spec_dir / "relu.onnx").read_bytes()


def test_external_data_is_embedded(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    weights = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, src / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    out = _export(_spec("ext.onnx"), src, tmp_path / "out" / "ext.onnx")
    assert [p.name for p in out.parent.iterdir()] == ["ext.onnx"]
    (src / "ext.data").unlink()
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.zeros((2, 4), np.float32)})
    np.testing.assert_array_equal(y, np.tile(np.arange(4, dtype=np.float32), (2, 1)))


def test_torch_reference_batches_by_max_batch_size(spec_dir: Path) -> None:
    model = _conv_spec(
        max_batch_size=4,
        profiles=[{"opt_batch": 2, "shapes": {"signal": {"min": [4, 1], "opt": [4, 10], "max": [4, 64]}}}],
    )
    source: Any = load_source(model, spec_dir=spec_dir, spec_file=spec_dir / "models.yaml")
    signal = np.ones((10, 4, 5), np.float32)
    out = torch_reference(model, source, {"signal": signal})
    assert out is not None and source.seen == [4, 4, 2]
    assert out["features"].shape == (10, 8, 5) and out["pooled"].shape == (10, 8)
    unbatched = _conv_spec(
        max_batch_size=0,
        inputs=[{"name": "signal", "dtype": "FP32", "dims": [10, 4, 5]}],
        outputs=[
            {"name": "features", "dtype": "FP32", "dims": [10, 8, 5]},
            {"name": "pooled", "dtype": "FP32", "dims": [10, 8]},
        ],
        profiles=[],
    )
    source.seen.clear()
    torch_reference(unbatched, source, {"signal": signal})
    assert source.seen == [10]


def test_torch_reference_is_none_for_onnx_sources() -> None:
    assert torch_reference(_spec("relu.onnx"), _relu_model(), {"x": np.zeros((1, 4), np.float32)}) is None
