"""An output's labels: a file beside the spec, or a factory whose list the repository writes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.configs import label_file_name
from builder.errors import SpecError
from builder.repository import label_lines
from builder.spec import DType, TensorSpec

FACTORIES = """
def three():
    return ["cat", "dog", "bird"]

def empty():
    return []

def numbers():
    return [1, 2]

def broken():
    return ["one\\ntwo"]
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "labelzoo.py").write_text(FACTORIES)
    (tmp_path / "labels.txt").write_text("a\nb\n")
    yield tmp_path / "models.yaml"
    sys.modules.pop("labelzoo", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def logits(labels: str) -> TensorSpec:
    return TensorSpec(name="logits", dtype=DType.FP32, dims=[3], labels=labels)


def test_a_file_gives_its_lines_and_its_basename(spec_file: Path) -> None:
    assert label_lines(logits("labels.txt"), spec_file, "m", "outputs[0].labels") == ["a", "b"]
    assert label_file_name("zoo/resnet18_labels.txt") == "resnet18_labels.txt"


def test_a_factory_gives_its_list_under_the_functions_name(spec_file: Path) -> None:
    assert label_lines(logits("labelzoo:three"), spec_file, "m", "outputs[0].labels") == [
        "cat",
        "dog",
        "bird",
    ]
    assert label_file_name("labelzoo:three") == "three.txt"


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("missing.txt", "labels file 'missing.txt' not found"),
        ("labelzoo:empty", "must return a non-empty list of str"),
        ("labelzoo:numbers", "must return a non-empty list of str"),
        ("labelzoo:broken", "a label with a line break"),
        ("labelzoo:nothing", "has no callable 'nothing'"),
        ("nomodule:three", "cannot import module 'nomodule'"),
    ],
)
def test_bad_labels_name_the_file_model_and_field(spec_file: Path, labels: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        label_lines(logits(labels), spec_file, "m", "outputs[0].labels")
    text = str(err.value)
    assert message in text and "outputs[0].labels" in text and str(spec_file) in text
