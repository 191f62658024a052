"""Bad input: exit status 2, one line naming file, model and field, repository untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from builder.cli import main
from tests.conftest import tree_digest

pytestmark = pytest.mark.slow


@pytest.fixture
def built(tiny_project: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The tiny project, built once into its repository."""
    assert build(tiny_project) == 0
    capsys.readouterr()
    return tiny_project


def build(project: Path) -> int:
    return main(
        [
            "build",
            "--spec",
            str(project / "models.yaml"),
            "--repo",
            str(project / "model_repository"),
            "--target",
            "local",
        ]
    )


def edit_spec(project: Path, change: Callable[[dict], None]) -> None:
    path = project / "models.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def model(doc: dict) -> dict:
    return doc["models"][0]


def broken_onnx(project: Path) -> None:
    """A graph whose node reads a tensor nothing produces: the checker rejects it."""
    node = helper.make_node("Relu", ["missing"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
    )
    onnx.save(helper.make_model(graph), project / "broken.onnx")


def onnx_with_input_x(project: Path) -> None:
    """The tiny model's signature as a plain ONNX graph (input 'x', output 'y')."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [16, 10], np.ones(160, np.float32))
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [weight],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        project / "given.onnx",
    )


def wrong_shape_calibration(project: Path) -> None:
    np.savez(project / "data" / "calib.npz", x=np.zeros((8, 15), np.float32))


CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "bad yaml": (
        lambda p: (p / "models.yaml").write_text("models:\n  - name: [tiny\n"),
        ("models.yaml", "invalid YAML", "line"),
    ),
    "unknown field": (
        lambda p: edit_spec(p, lambda d: model(d).update(max_batch=4)),
        ("models.yaml", "model 'tiny'", "max_batch", "unknown field"),
    ),
    "bad name": (
        lambda p: edit_spec(p, lambda d: model(d).update(name="tiny model")),
        ("models.yaml", "model 'tiny model'", "name"),
    ),
    "missing source": (
        lambda p: edit_spec(p, lambda d: model(d).update(source="nowhere.onnx")),
        ("models.yaml", "model 'tiny'", "source", "not found"),
    ),
    "factory that does not exist": (
        lambda p: edit_spec(p, lambda d: model(d).update(source="tinyzoo:nothing")),
        ("models.yaml", "model 'tiny'", "source", "no callable 'nothing'"),
    ),
    "onnx failing the checker": (
        lambda p: (broken_onnx(p), edit_spec(p, lambda d: model(d).update(source="broken.onnx"))),
        ("models.yaml", "model 'tiny'", "source"),
    ),
    "input name disagrees with the graph": (
        lambda p: (
            onnx_with_input_x(p),
            edit_spec(
                p, lambda d: (model(d).update(source="given.onnx"), model(d)["inputs"][0].update(name="x0"))
            ),
        ),
        ("models.yaml", "model 'tiny'", "inputs", "x0"),
    ),
    "dtype disagrees with the graph": (
        lambda p: edit_spec(p, lambda d: model(d)["outputs"][0].update(dtype="FP16")),
        ("models.yaml", "model 'tiny'", "outputs[0]", "FP16"),
    ),
    "preferred batch above max_batch_size": (
        lambda p: edit_spec(p, lambda d: model(d)["batching"].update(preferred_batch_sizes=[4, 16])),
        ("models.yaml", "model 'tiny'", "preferred_batch_sizes", "16"),
    ),
    "calibration data of the wrong shape": (
        wrong_shape_calibration,
        ("calib.npz", "model 'tiny'", "calibration"),
    ),
    "missing calibration data": (
        lambda p: (p / "data" / "calib.npz").unlink(),
        ("models.yaml", "model 'tiny'", "calibration.data", "not found"),
    ),
    "a tolerance no variant meets": (
        lambda p: edit_spec(
            p,
            lambda d: model(d).update(
                precisions=["fp16", "int8"], tolerances={"fp16": {"max_abs": 0.0}, "int8": {"max_abs": 0.0}}
            ),
        ),
        ("models.yaml", "model 'tiny'", "tolerances", "max_abs"),
    ),
    "an int8 tolerance the variant misses while named for serving": (
        lambda p: edit_spec(
            p,
            lambda d: (
                model(d)["tolerances"].update(int8={"min_cosine": 1.0}),
                model(d).update(targets={"local": {"serve": "int8"}}),
            ),
        ),
        (
            "models.yaml",
            "model 'tiny'",
            "targets.local.serve",
            "no variant named for target 'local'",
            "min_cosine",
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case: str, built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plant, expected = CASES[case]
    repo = built / "model_repository"
    before = tree_digest(repo)
    plant(built)
    assert build(built) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith("error: "), err
    for word in expected:
        assert word in line, (case, line)
    assert tree_digest(repo) == before
    assert not list(built.glob("model_repository.staging-*"))
