"""Model sources: one module per kind of ``models:`` ``source``, each an object the build asks.

``SOURCES`` is every kind by name; ``source_of`` is the one a validated entry recorded (its
``source_kind``, decided once when the spec was loaded: builder/spec/kinds.py). Nothing else in the
builder switches on a source's form (docs/sources.md says how to add a kind).
"""

from __future__ import annotations

from pathlib import Path

from builder.sources.base import InitRequest, ModelSource, Samples
from builder.sources.checkpoint import CheckpointSource
from builder.sources.factory import FactorySource
from builder.sources.llm_base import LLMSource
from builder.sources.llm_checkpoint import CheckpointFolderSource
from builder.sources.llm_gguf import GGUFSource
from builder.sources.onnx_file import OnnxFileSource
from builder.spec import ModelSpec
from builder.stages.export import write_onnx

__all__ = [
    "LLM_SOURCES",
    "SOURCES",
    "InitRequest",
    "LLMSource",
    "ModelSource",
    "Samples",
    "export",
    "llm_source_of",
    "load_source",
    "source_of",
]

SOURCES: dict[str, ModelSource] = {s.kind: s for s in (OnnxFileSource(), FactorySource(), CheckpointSource())}


# The kinds of an ``llms:`` source, asked with the path the entry resolves to.
LLM_SOURCES: dict[str, LLMSource] = {s.kind: s for s in (GGUFSource(), CheckpointFolderSource())}


def llm_source_of(path: Path) -> LLMSource:
    """The kind that claims an LLM's resolved source path (exactly one does)."""
    claimed = [s for s in LLM_SOURCES.values() if s.claims(path)]
    if len(claimed) != 1:
        raise LookupError(f"LLM source '{path}' is claimed by {[s.kind for s in claimed] or 'no kind'}")
    return claimed[0]


def source_of(model: ModelSpec) -> ModelSource:
    """The object of the kind the entry recorded when the spec was loaded."""
    return SOURCES[model.source_kind.value]


def load_source(model: ModelSpec, *, spec_dir: Path, spec_file: Path) -> object:
    """A ``torch.nn.Module``, an ``onnx.ModelProto`` or the ``Path`` of an .onnx file."""
    return source_of(model).load(model, spec_dir, spec_file)


def export(model: ModelSpec, *, spec_dir: Path, spec_file: Path, out: Path) -> Path:
    """The export stage: the model's source as one .onnx file at ``out`` (``export.log`` beside it)."""
    source = source_of(model)
    return write_onnx(model, lambda: source.load(model, spec_dir, spec_file), spec_file=spec_file, out=out)
