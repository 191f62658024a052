"""builder.sources: each form of ``source`` a valid spec allows is of one kind, recorded when the
spec is loaded, and the sources are part of the code of the stages that read them."""

from __future__ import annotations

import pytest

from builder.sources import SOURCES, source_of
from builder.spec import ModelSpec
from builder.stages.code import ROOT, closure
from builder.stages.export import ExportInputs
from builder.stages.reference import ReferenceInputs
from tests.builder.sources.entries import model


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        (model("models/m.onnx"), "onnx"),
        (model("zoo.resnet:resnet18"), "factory"),
        (model("checkpoints/bert", task="text-classification"), "checkpoint"),
        # a graph's form decides: an object detector's graph names its task too
        (model("models/det.onnx", task="object-detection", detection={}), "onnx"),
    ],
)
def test_each_form_is_of_one_kind(entry: ModelSpec, kind: str) -> None:
    assert entry.source_kind.value == kind
    assert source_of(entry) is SOURCES[kind]


def test_the_registry_is_keyed_by_each_kind() -> None:
    assert list(SOURCES) == ["onnx", "factory", "checkpoint"]
    assert all(s.kind == name and s.description for name, s in SOURCES.items())


def test_editing_a_source_kind_reruns_the_export_and_reference_stages() -> None:
    files = {str(p.relative_to(ROOT)) for p in closure(ExportInputs.CODE)}
    assert {"builder/sources/factory.py", "builder/stages/checkpoint.py"} <= files
    assert "builder/sources/onnx_file.py" in {str(p.relative_to(ROOT)) for p in closure(ReferenceInputs.CODE)}
