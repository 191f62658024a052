"""Export stage: the LLM's source, resolved to a path (relative to the spec, or what its factory
returns), made into a safetensors checkpoint folder by the source kind that claims it
(``builder.sources.LLM_SOURCES``: a GGUF file or a checkpoint folder).
"""

from __future__ import annotations

import os
from pathlib import Path

from builder.errors import SpecError
from builder.factories import import_factory
from builder.sources import llm_source_of
from builder.sources.llm_base import Exported
from builder.spec.llm import LLMDType, LLMSpec, SourceKind

__all__ = ["Exported", "export", "resolve_source"]


def resolve_source(spec: LLMSpec, *, spec_file: Path) -> Path:
    """The source as a path: relative to the spec's folder, or what its factory returns."""
    spec_dir = spec_file.parent
    if spec.source_kind is not SourceKind.FACTORY:
        return (spec_dir / spec.source).resolve()
    factory = import_factory(spec.source, spec_dir, spec_file=spec_file, model=spec.name, field="source")
    try:
        made = factory()
    except Exception as exc:  # the factory is the user's code: report whatever it raised
        raise SpecError(
            f"{spec.source}() failed: {type(exc).__name__}: {exc}",
            file=spec_file,
            model=spec.name,
            field="source",
        ) from exc
    if not isinstance(made, (str, os.PathLike)):
        raise SpecError(
            f"{spec.source}() returned {type(made).__name__}, not the path of a .gguf file or a folder",
            file=spec_file,
            model=spec.name,
            field="source",
        )
    return Path(made).resolve()


def export(
    source: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None = None
) -> Exported:
    """The source as a checkpoint folder at ``out``, made by the kind that claims it."""
    return llm_source_of(source).export(source, out, dtype, file=file, model=model, log=log)
