"""A checkpoint folder as an LLM source: copied as it is (vLLM casts to the served dtype at load)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from builder.errors import SpecError
from builder.sources.llm_base import Exported, publish, staging
from builder.spec.llm import LLMDType

# What a checkpoint folder must hold besides weights.
CHECKPOINT_FILES = ("config.json", "tokenizer_config.json")


class CheckpointFolderSource:
    kind = "checkpoint"
    description = "a Hugging Face checkpoint folder with safetensors weights, copied as it is"
    compared_on_its_own = False

    def claims(self, path: Path) -> bool:
        return path.suffix != ".gguf" and not path.is_file()

    def export(
        self, source: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None
    ) -> Exported:
        return copy_checkpoint(source, out, dtype, file=file, model=model)


def copy_checkpoint(src: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str) -> Exported:
    """Copy a checkpoint folder as it is (vLLM casts to ``dtype`` at load)."""
    if not src.is_dir():
        raise SpecError(f"checkpoint folder '{src}' does not exist", file=file, model=model, field="source")
    for required in CHECKPOINT_FILES:
        if not (src / required).is_file():
            raise SpecError(
                f"checkpoint folder '{src}' has no {required}", file=file, model=model, field="source"
            )
    if not any(src.glob("*.safetensors")):
        raise SpecError(
            f"checkpoint folder '{src}' has no .safetensors weights", file=file, model=model, field="source"
        )
    folder = staging(out)
    shutil.rmtree(folder)
    shutil.copytree(src, folder)
    return publish(folder, out, dtype, parameters=_parameters(folder))


def _parameters(folder: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                total += _numel(handle.get_slice(key).get_shape())
    return total


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
