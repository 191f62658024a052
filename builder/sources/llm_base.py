"""What an LLM source is to the build: a GGUF file or a checkpoint folder, made into a safetensors
checkpoint folder that vLLM and transformers both load (config, weights, tokenizer, chat template).

Each kind is one object in one module (``llm_gguf``, ``llm_checkpoint``); ``LLM_SOURCES`` in
``builder.sources`` lists them, and the LLM stages ask the one that claims the resolved path.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from builder.spec.llm import LLMDType


@dataclass(frozen=True)
class Exported:
    folder: Path
    dtype: LLMDType
    parameters: int
    weights_bytes: int  # size of the safetensors files


class LLMSource(Protocol):
    """One kind of ``llms:`` source (the path the entry names, or its factory returns)."""

    kind: str
    description: str
    # Whether the check stage compares the export with the source read on its own (a GGUF file:
    # transformers dequantizes it; the ``gguf`` package reads it independently).
    compared_on_its_own: bool

    def claims(self, path: Path) -> bool:
        """The resolved source is of this kind."""
        ...

    def export(
        self, source: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None
    ) -> Exported:
        """The source as a checkpoint folder at ``out``; a one-line SpecError for a bad one."""
        ...


def staging(out: Path) -> Path:
    """An empty folder beside ``out`` to write into before :func:`publish` renames it."""
    folder = out.with_name(out.name + ".partial")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def publish(folder: Path, out: Path, dtype: LLMDType, *, parameters: int) -> Exported:
    shutil.rmtree(out, ignore_errors=True)
    folder.rename(out)
    weights = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    return Exported(folder=out, dtype=dtype, parameters=parameters, weights_bytes=weights)
