"""Export stage: a GGUF file or a checkpoint folder → a safetensors checkpoint folder that vLLM
and transformers both load (config, weights in the spec's dtype, tokenizer, chat template).

transformers dequantizes a GGUF file on load but refuses to save the result ("quantized with
GGUF"), so the weights go through a model made from the config without the quantization
entry.
"""

from __future__ import annotations

import os
import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import SpecError
from builder.factories import import_factory
from builder.progress import quiet
from builder.spec.llm import LLMDType, LLMSpec, SourceKind

GGUF_MAGIC = b"GGUF"
# What a checkpoint folder must hold besides weights.
CHECKPOINT_FILES = ("config.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Exported:
    folder: Path
    dtype: LLMDType
    parameters: int
    weights_bytes: int  # size of the safetensors files


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
        ) from None
    if not isinstance(made, (str, os.PathLike)):
        raise SpecError(
            f"{spec.source}() returned {type(made).__name__}, not the path of a .gguf file or a folder",
            file=spec_file,
            model=spec.name,
            field="source",
        )
    return Path(made).resolve()


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
    staging = _staging(out)
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    return _publish(staging, out, dtype, parameters=sum(p.numel() for p in plain.parameters()))


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
    staging = _staging(out)
    shutil.rmtree(staging)
    shutil.copytree(src, staging)
    return _publish(staging, out, dtype, parameters=_parameters(staging))


def export(
    source: Path, out: Path, dtype: LLMDType, *, file: Path | str, model: str, log: Path | None = None
) -> Exported:
    """A .gguf file (or any file) is dequantized; anything else must be a checkpoint folder."""
    if source.suffix == ".gguf" or source.is_file():
        return export_gguf(source, out, dtype, file=file, model=model, log=log)
    return copy_checkpoint(source, out, dtype, file=file, model=model)


def _staging(out: Path) -> Path:
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _publish(staging: Path, out: Path, dtype: LLMDType, *, parameters: int) -> Exported:
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    weights = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    return Exported(folder=out, dtype=dtype, parameters=parameters, weights_bytes=weights)


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


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
