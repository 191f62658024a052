"""LoRA as in Triton's vLLM backend: ``multi_lora.json`` names the adapters, a request picks one with
``lora_name``; the config's ``lora_names`` must agree with that file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import ENGINE_ARGS_FILE, LORA_NAMES, MULTI_LORA_FILE
from .requests import BadRequest


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter of multi_lora.json: its name, vLLM's id for it (its place there, from 1, as
    Triton's vLLM backend numbers them) and its folder."""

    name: str
    id: int
    path: str


def parse_multi_lora(version_dir: Path, engine_config: dict[str, Any]) -> dict[str, Adapter] | None:
    """The adapters of ``multi_lora.json`` when model.json sets ``enable_lora`` (true or "true", as
    that backend reads it), else None; relative folders are resolved against the version folder.
    FileNotFoundError or ValueError naming the file when it is missing or bad."""
    if str(engine_config.get("enable_lora", False)).lower() != "true":
        return None
    path = version_dir / MULTI_LORA_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; {ENGINE_ARGS_FILE} sets enable_lora, and this file names the adapters "
            "(a JSON object: name -> adapter folder)"
        )
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path}: must be a non-empty JSON object of adapter name -> folder")
    adapters: dict[str, Adapter] = {}
    for i, (name, folder) in enumerate(table.items(), start=1):
        if not name or not isinstance(folder, str) or not folder:
            raise ValueError(
                f"{path}: adapter {name!r}: its folder must be a non-empty string, got {folder!r}"
            )
        local = version_dir / folder
        resolved = str(local) if not Path(folder).is_absolute() and local.exists() else folder
        adapters[name] = Adapter(name, i, resolved)
    return adapters


def check_lora_names(parameter: str, adapters: dict[str, Adapter] | None) -> None:
    """The config's ``lora_names`` (what the OpenAI endpoint lists), when set, must be the adapters
    of multi_lora.json; ValueError saying both otherwise."""
    if not parameter:
        return
    try:
        names = json.loads(parameter)
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list):
        raise ValueError(f"parameter {LORA_NAMES}: not a JSON list ({parameter!r})")
    found = sorted(adapters or {})
    if sorted(names) != found:
        raise ValueError(
            f"parameter {LORA_NAMES} {sorted(names)} does not match the adapters of {MULTI_LORA_FILE} {found}"
        )


def choose_adapter(lora_name: str | None, adapters: dict[str, Adapter] | None) -> Adapter | None:
    """The adapter a request asked for; BadRequest in the words of Triton's vLLM backend when
    LoRA is off or the name is not one of multi_lora.json's."""
    if lora_name is None:
        return None
    if adapters is None:
        raise BadRequest("LoRA feature is not enabled.")
    if lora_name not in adapters:
        raise BadRequest(f"LoRA {lora_name} is not supported, we currently support {list(adapters)}")
    return adapters[lora_name]


def lora_request(adapter: Adapter | None) -> Any:
    """vLLM's LoRARequest for an adapter (None: the base model)."""
    if adapter is None:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(adapter.name, adapter.id, adapter.path)
