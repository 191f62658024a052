"""What kind a source is, decided once while the spec is loaded, as Polygraphy's ``ModelArgs``
records its ``model_type``: each entry records its kind (``source_kind``, out of the dump that
stage and repository keys hash) and the rest of the builder asks it. ``builder.sources`` holds one
object per kind (``SOURCES``, ``LLM_SOURCES``), keyed by these values.
"""

from __future__ import annotations

import re
from enum import Enum

FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class ModelSourceKind(str, Enum):
    """A ``models:`` entry's source."""

    ONNX = "onnx"  # an .onnx file, relative to the spec
    FACTORY = "factory"  # package.module:function returning a torch module or an ONNX graph
    CHECKPOINT = "checkpoint"  # a Hugging Face checkpoint folder, with task:


class SourceKind(str, Enum):
    """An ``llms:`` entry's source."""

    GGUF = "gguf"
    CHECKPOINT = "checkpoint"  # a folder with config.json, weights and tokenizer
    FACTORY = "factory"  # pkg.mod:fn returning a .gguf file or a checkpoint folder


def model_source_kind(source: str, *, checkpoint: bool) -> ModelSourceKind | None:
    """``checkpoint``: the entry names a task, so a source of no graph's form is the checkpoint's
    folder (a graph source may name a task too: an object detector's). None: a form no kind takes
    (a new kind's form goes here)."""
    if FACTORY_PATTERN.match(source):
        return ModelSourceKind.FACTORY
    if source.endswith(".onnx"):
        return ModelSourceKind.ONNX
    return ModelSourceKind.CHECKPOINT if checkpoint else None


def llm_source_kind(source: str) -> SourceKind:
    if FACTORY_PATTERN.match(source):
        return SourceKind.FACTORY
    return SourceKind.GGUF if source.endswith(".gguf") else SourceKind.CHECKPOINT
