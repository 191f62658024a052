"""A GGUF file as an LLM source: dequantized with transformers and saved as a checkpoint.

transformers dequantizes a GGUF file on load but refuses to save the result ("quantized with
GGUF"), so the weights go through a model made from the config without the quantization entry.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

from builder.errors import SpecError
from builder.progress import quiet
from builder.sources.llm_base import Exported, publish, staging
from builder.spec.llm import LLMDType

GGUF_MAGIC = b"GGUF"


class GGUFSource:
    kind = "gguf"
    description = (
        "a GGUF file (any file): dequantized by transformers, checked against the gguf package's reading"
    )
    compared_on_its_own = True

    def claims(self, path: Path) -> bool:
        return path.suffix == ".gguf" or path.is_file()

    def export(
        self, source: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None
    ) -> Exported:
        return export_gguf(source, out, dtype, file=file, model=model, log=log)


def check_gguf(path: Path, *, file: Path | str, model: str) -> None:
    """One-line error unless ``path`` is a GGUF file (its first four bytes are ``GGUF``)."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise SpecError(
            f"cannot read '{path}': {exc.strerror}", file=file, model=model, field="source"
        ) from None
    if magic != GGUF_MAGIC:
        raise SpecError(
            f"'{path}' is not a GGUF file (starts with {magic!r}, not b'GGUF')",
            file=file,
            model=model,
            field="source",
        )


def export_gguf(
    gguf: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None = None
) -> Exported:
    """Dequantize ``gguf`` with transformers and save it, in ``dtype``, to ``out``; the
    libraries' output goes to ``log`` when given."""
    check_gguf(gguf, file=file, model=model)
    _offline()
    with quiet(log) if log is not None else nullcontext():
        return _dequantize_and_save(gguf, out, dtype)


def _dequantize_and_save(gguf: Path, out: Path, dtype: LLMDType) -> Exported:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype.value)
    folder, name = str(gguf.parent), gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    del loaded
    written = staging(out)
    plain.save_pretrained(written)
    tokenizer.save_pretrained(written)
    return publish(written, out, dtype, parameters=sum(p.numel() for p in plain.parameters()))


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
