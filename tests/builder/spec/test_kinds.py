"""A source's kind is decided once, when the spec is loaded (as Polygraphy's ModelArgs records its
model_type): the entry records it, out of the dump that stage and repository keys hash, and every
kind it can record has its object in builder.sources."""

from __future__ import annotations

import pytest

from builder.sources import LLM_SOURCES, SOURCES, source_of
from builder.spec import ModelSpec
from builder.spec.kinds import ModelSourceKind, SourceKind, model_source_kind
from builder.spec.llm import parse_llm
from tests.builder.llm.test_llm_spec import entry
from tests.builder.sources.entries import model


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (model("models/m.onnx"), ModelSourceKind.ONNX),
        (model("zoo.resnet:resnet18"), ModelSourceKind.FACTORY),
        (model("checkpoints/minilm", task="feature-extraction"), ModelSourceKind.CHECKPOINT),
        (model("models/det.onnx", task="object-detection", detection={}), ModelSourceKind.ONNX),
    ],
)
def test_the_entry_records_its_kind_and_the_sources_answer_by_it(
    spec: ModelSpec, kind: ModelSourceKind
) -> None:
    assert spec.source_kind is kind and source_of(spec) is SOURCES[kind]


def test_the_recorded_kind_is_out_of_the_dump_the_keys_hash() -> None:
    spec = model("models/m.onnx")
    assert "source_kind" not in spec.model_dump_json() and ModelSpec.model_validate(spec.model_dump()) == spec


def test_every_kind_has_its_source_object() -> None:
    assert set(SOURCES) == {k.value for k in ModelSourceKind}
    # A factory returns the path of one of the others, which LLM_SOURCES tells apart once it has run.
    assert set(LLM_SOURCES) == {k.value for k in SourceKind} - {SourceKind.FACTORY.value}


@pytest.mark.parametrize("source", ["m.pt", "models/m", "m.onnx.gz"])
def test_a_form_no_kind_takes_has_none(source: str) -> None:
    assert model_source_kind(source, checkpoint=False) is None
    assert model_source_kind(source, checkpoint=True) is ModelSourceKind.CHECKPOINT


def test_an_llm_records_its_kind_out_of_the_dump() -> None:
    spec = parse_llm(entry(source="models/chat.gguf"), file="models.yaml")
    assert spec.source_kind is SourceKind.GGUF and "source_kind" not in spec.model_dump_json()
