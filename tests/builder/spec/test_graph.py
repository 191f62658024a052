"""Tensors, batching, profiles and tolerances read from an ONNX graph when the spec omits them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from builder.errors import SpecError
from builder.spec import DType, load_spec
from tests.builder.fixtures import foreign_onnx as f

IRIS = Path(np.__file__).parents[1] / "onnxruntime" / "datasets" / "logreg_iris.onnx"


def _spec(tmp_path: Path, **entry: object) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", **entry}]}))
    return path


def test_minus_one_and_unnamed_dims_are_dynamic_and_a_dynamic_first_axis_everywhere_batches(
    tmp_path: Path,
) -> None:
    f.save(f.conv_graph(11), tmp_path / "conv.onnx")
    model = load_spec(_spec(tmp_path, source="conv.onnx")).models[0]
    assert model.max_batch_size == 8
    assert [(t.name, t.dtype, t.dims) for t in model.inputs] == [("x", DType.FP32, [3, -1, -1])]
    assert [(t.name, t.dims) for t in model.outputs] == [("save_infer_model/scale_0.tmp_1", [4])]
    shapes = model.profiles[0].shapes["x"]
    assert shapes.min[0] == shapes.opt[0] == shapes.max[0] == 3
    assert shapes.min[1] <= shapes.opt[1] <= shapes.max[1]
    assert set(model.tolerances) == {model.precisions[0]}
    assert model.evaluation is None


def test_samples_size_the_profile_and_the_spec_overrides_what_it_states(tmp_path: Path) -> None:
    f.save(f.conv_graph(12), tmp_path / "conv.onnx")
    np.savez(tmp_path / "eval.npz", x=np.zeros((4, 3, 40, 24), np.float32))
    model = load_spec(
        _spec(tmp_path, source="conv.onnx", max_batch_size=2, evaluation={"data": "eval.npz"})
    ).models[0]
    assert model.max_batch_size == 2
    assert model.profiles[0].shapes["x"].opt == [3, 40, 24]


def test_a_rank_0_input_becomes_dims_1_and_a_batch_on_axis_1_means_no_batching(tmp_path: Path) -> None:
    f.save(f.scalar_input_graph(), tmp_path / "scalar.onnx")
    f.save(f.batch_on_axis_1_graph(), tmp_path / "cell.onnx")
    scalar = load_spec(_spec(tmp_path, source="scalar.onnx")).models[0]
    assert scalar.max_batch_size == 0
    assert {t.name: t.dims for t in scalar.inputs} == {"x": [-1, 16], "sr": [1]}
    cell = load_spec(_spec(tmp_path, source="cell.onnx")).models[0]
    assert cell.max_batch_size == 0
    assert {t.name: t.dims for t in cell.inputs} == {"x": [-1, 4], "state": [2, -1, 4]}


def test_a_factory_returning_a_model_proto_is_read_too(tmp_path: Path) -> None:
    (tmp_path / "maker.py").write_text(
        "from tests.builder.fixtures.foreign_onnx import slashed_names_graph\n"
        "def make():\n    return slashed_names_graph()\n"
    )
    model = load_spec(_spec(tmp_path, source="maker:make")).models[0]
    assert [t.name for t in model.inputs] == ["input/ids.0"]
    assert [t.name for t in model.outputs] == ["/model/out.1"]


def test_explicit_rank_0_dims_without_batching_are_served_as_1_as_when_left_to_the_graph(
    tmp_path: Path,
) -> None:
    f.save(f.scalar_input_graph(), tmp_path / "scalar.onnx")
    path = _spec(
        tmp_path,
        source="scalar.onnx",
        inputs=[
            {"name": "x", "dtype": "FP32", "dims": [2, 16]},
            {"name": "sr", "dtype": "INT64", "dims": []},
        ],
    )
    model = load_spec(path).models[0]
    assert {t.name: t.dims for t in model.inputs} == {"x": [2, 16], "sr": [1]}
    assert model == load_spec(_spec(tmp_path, source="scalar.onnx", inputs=[
        {"name": "x", "dtype": "FP32", "dims": [2, 16]}, {"name": "sr", "dtype": "INT64", "dims": [1]},
    ])).models[0]  # fmt: skip


def test_a_converter_s_map_output_is_refused_naming_it(tmp_path: Path) -> None:
    """onnxruntime's own logreg_iris.onnx (OnnxMLTools) returns a sequence of maps (ZipMap). The
    pinned onnxruntime wheel ships it: a missing file fails the test rather than skipping it."""
    assert IRIS.is_file(), f"{IRIS}: the pinned onnxruntime ships it"
    with pytest.raises(SpecError, match="'probabilities' is a sequence, not a tensor") as err:
        load_spec(_spec(tmp_path, source=str(IRIS)))
    assert err.value.field == "outputs"


def test_a_file_that_is_not_onnx_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\x00not a protobuf\xff" * 3)
    with pytest.raises(SpecError, match=r"cannot read 'bad\.onnx' as ONNX") as err:
        load_spec(_spec(tmp_path, source="bad.onnx"))
    assert err.value.field == "source"


def test_a_factory_raising_while_the_spec_loads_is_the_user_s_error(tmp_path: Path) -> None:
    (tmp_path / "raising_maker.py").write_text("def make():\n    return {}['weights']\n")
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, source="raising_maker:make"))
    line = info.value.one_line()
    assert line.startswith(f"{tmp_path / 'models.yaml'}: model 'm': source: ")
    assert "raising_maker:make() failed: KeyError: 'weights'" in line
    assert isinstance(info.value.__cause__, KeyError)
    sys.modules.pop("raising_maker", None)


def test_a_file_that_is_not_onnx_keeps_the_reader_s_exception_as_the_cause(tmp_path: Path) -> None:
    (tmp_path / "junk.onnx").write_bytes(b"\xff not a protobuf \x00" * 10)
    with pytest.raises(SpecError, match=r"cannot read 'junk\.onnx' as ONNX") as info:
        load_spec(_spec(tmp_path, source="junk.onnx"))
    assert info.value.__cause__ is not None
