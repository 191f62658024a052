"""LoRA adapters (models.yaml's ``lora:``): each is a PEFT LoRA adapter folder made for the
model's own checkpoint. Checked from files alone (``adapter_config.json`` and the safetensors
headers of adapter and checkpoint), so a bad adapter is refused at build time rather than by
vLLM at a request's first use of it, which is when vLLM loads an adapter.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import SpecError
from builder.factories import import_factory
from builder.spec.llm import LLMSpec, LoRA

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
FACTORS = (".lora_A.weight", ".lora_B.weight")
MAX_HEADER_BYTES = 100 << 20  # a safetensors header larger than this is not one


@dataclass(frozen=True)
class Adapter:
    name: str
    folder: Path
    rank: int  # the largest rank of its modules
    modules: int  # modules it adapts


def adapter_field(name: str) -> str:
    return f"lora.adapters.{name}"


def resolve_adapters(spec: LLMSpec, *, spec_file: Path) -> dict[str, Path]:
    """Each adapter's folder: relative to the spec's folder, or what its factory returns."""
    lora = spec.lora
    if lora is None:
        return {}
    return {name: _resolve(ref, name, spec, spec_file) for name, ref in lora.adapters.items()}


def _resolve(ref: str, name: str, spec: LLMSpec, spec_file: Path) -> Path:
    field = adapter_field(name)
    if not LoRA.is_factory(ref):
        return (spec_file.parent / ref).resolve()
    factory = import_factory(ref, spec_file.parent, spec_file=spec_file, model=spec.name, field=field)
    try:
        made = factory()
    except Exception as exc:  # the factory is the user's code: report whatever it raised
        raise SpecError(f"{ref}() failed: {type(exc).__name__}: {exc}", file=spec_file, model=spec.name,
                        field=field) from exc  # fmt: skip
    if not isinstance(made, (str, os.PathLike)):
        raise SpecError(f"{ref}() returned {type(made).__name__}, not the path of an adapter folder",
                        file=spec_file, model=spec.name, field=field)  # fmt: skip
    return Path(made).resolve()


def check_adapter_folder(folder: Path, name: str, spec: LLMSpec, *, file: Path | str) -> dict[str, Any]:
    """The folder holds a PEFT LoRA adapter within ``max_lora_rank``; returns its config."""
    assert spec.lora is not None

    def fail(message: str) -> SpecError:
        return SpecError(message, file=file, model=spec.name, field=adapter_field(name))

    if not folder.is_dir():
        raise fail(f"'{folder}' is not a folder" if folder.exists() else f"'{folder}' not found")
    config_file = folder / ADAPTER_CONFIG
    if not config_file.is_file():
        raise fail(f"'{folder}' is not a PEFT LoRA adapter folder (no {ADAPTER_CONFIG})")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise fail(f"{config_file} is not valid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise fail(f"{config_file} is not a JSON object")
    kind = config.get("peft_type")
    if kind != "LORA":
        raise fail(f"'{folder}' is a PEFT {kind} adapter, not LoRA (peft_type in {ADAPTER_CONFIG})")
    for feature in ("use_dora", "modules_to_save"):
        if config.get(feature):
            raise fail(f"{ADAPTER_CONFIG} sets {feature}, which vLLM does not serve")
    ranks = [config.get("r"), *(config.get("rank_pattern") or {}).values()]
    if not all(isinstance(r, int) and r >= 1 for r in ranks):
        raise fail(f"{ADAPTER_CONFIG}: r (and rank_pattern) must be positive integers, got {ranks}")
    if max(ranks) > spec.lora.max_lora_rank:
        raise fail(f"rank {max(ranks)} is above lora.max_lora_rank {spec.lora.max_lora_rank}")
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise fail(f"'{folder}' has no {ADAPTER_WEIGHTS} (save the adapter with safetensors)")
    return config


def check_adapter(folder: Path, name: str, spec: LLMSpec, checkpoint: Path, *, file: Path | str) -> Adapter:
    """The adapter fits the checkpoint: every module it adapts is a weight of the checkpoint, and
    its factors' shapes match that weight's (another architecture or hidden size does not)."""
    check_adapter_folder(folder, name, spec, file=file)

    def fail(message: str) -> SpecError:
        return SpecError(message, file=file, model=spec.name, field=adapter_field(name))

    try:
        factors = safetensors_shapes(folder / ADAPTER_WEIGHTS)
    except ValueError as exc:
        raise fail(f"{folder / ADAPTER_WEIGHTS}: {exc}") from exc
    base: dict[str, list[int]] = {}
    for weights in sorted(checkpoint.glob("*.safetensors")):
        base.update(safetensors_shapes(weights))
    modules: dict[str, dict[str, list[int]]] = {}
    for key, shape in factors.items():
        suffix = next((s for s in FACTORS if key.endswith(s)), None)
        if suffix is not None:
            modules.setdefault(key.removeprefix(PEFT_PREFIX).removesuffix(suffix), {})[suffix] = shape
    if not modules:
        raise fail(f"{ADAPTER_WEIGHTS} holds no LoRA factors (*{FACTORS[0]}, *{FACTORS[1]})")
    rank = 0
    for module, pair in sorted(modules.items()):
        a, b = pair.get(FACTORS[0]), pair.get(FACTORS[1])
        if a is None or b is None or len(a) != 2 or len(b) != 2 or a[0] != b[1]:
            raise fail(f"{module}: lora_A {a} and lora_B {b} are not one low-rank pair")
        weight = base.get(f"{module}.weight")
        if weight is None:
            raise fail(f"made for another architecture: the checkpoint has no module {module}")
        if [b[0], a[1]] != weight:
            raise fail(f"made for another base model: {module} adapts a [{b[0]}, {a[1]}] weight, "
                       f"the checkpoint's is {weight}")  # fmt: skip
        rank = max(rank, a[0])
    assert spec.lora is not None
    if rank > spec.lora.max_lora_rank:
        raise fail(f"rank {rank} is above lora.max_lora_rank {spec.lora.max_lora_rank}")
    return Adapter(name, folder, rank, len(modules))


def copy_adapter(folder: Path, out: Path) -> None:
    """The adapter's files (not its subfolders: checkpoints of a training run) into ``out``."""
    out.mkdir(parents=True)
    for item in sorted(folder.iterdir()):
        if item.is_file():
            shutil.copy2(item, out / item.name)


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors file's JSON header (no tensor is read)."""
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError("not a safetensors file (too short)")
        (size,) = struct.unpack("<Q", head)
        if size > MAX_HEADER_BYTES:
            raise ValueError("not a safetensors file (bad header size)")
        try:
            header = json.loads(handle.read(size))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError("not a safetensors file (bad header)") from exc
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file (bad header)")
    return {k: list(v["shape"]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
