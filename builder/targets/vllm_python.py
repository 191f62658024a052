"""An LLM's model folder. The local and cpu targets serve it as the ``vllm_engine`` Python-backend
model: vLLM's engine inside tritonserver, with the interface of Triton's vLLM backend. The gpu target
serves it with that backend itself, from the same engine arguments (``llm_entry`` makes both)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.llm.serving import (
    CHECKPOINT_DIR,
    LORA_DIR,
    MODEL_SOURCE,
    EngineArgs,
    Lane,
    ServingSettings,
    engine_args,
    local_config,
    model_json,
    multi_lora_json,
)
from builder.python_models import model_sources
from builder.python_models.vllm_engine.contract import ENGINE_ARGS_FILE, MULTI_LORA_FILE
from builder.records import LLMBuild
from builder.spec.llm import LLMSpec
from builder.targets.base import ModelEntry
from builder.targets.writer import write_entry

IN_PLACE = PurePosixPath()  # paths relative to the version folder


def vllm_python_entry(build: LLMBuild) -> ModelEntry:
    """The build's model folder: the verified checkpoint and adapters, the spec's settings."""
    spec = build.spec
    args, settings = engine_args(spec, build.verdict.dtype), serving_settings(spec)
    return vllm_python_model(spec.name, args, settings, checkpoint=build.checkpoint, adapters=build.adapters)


def vllm_python_model(
    name: str, engine: EngineArgs, settings: ServingSettings | None = None, *,
    checkpoint: Path | None = None, adapters: Mapping[str, Path] | None = None,
) -> ModelEntry:  # fmt: skip
    """The ``vllm_engine`` model: its config, and the package in ``1/`` (``model.py`` and its
    modules) beside what ``llm_entry`` puts there, the paths relative to the version folder (the
    model resolves them there)."""
    return llm_entry(
        local_config(name, settings), engine, sources=model_sources(MODEL_SOURCE.parent),
        checkpoint=checkpoint, adapters=adapters,
    )  # fmt: skip


def llm_entry(
    config: ModelConfig, engine: EngineArgs, *, version: PurePosixPath = IN_PLACE,
    sources: Mapping[str, Path] | None = None, checkpoint: Path | None = None,
    adapters: Mapping[str, Path] | None = None,
) -> ModelEntry:  # fmt: skip
    """An LLM's model folder for either server: ``config``, ``1/model.json`` from ``engine``,
    ``checkpoint``'s files under ``1/checkpoint/``, each of ``adapters`` under ``1/loras/<name>/``
    with ``1/multi_lora.json`` naming them, and ``sources`` (code) in ``1/``.

    ``version`` is the version folder as vLLM will resolve the paths: relative (the ``vllm_engine``
    model resolves them against the version folder) or absolute where the server mounts the
    repository (Triton's vLLM backend hands them to vLLM as written, and vLLM resolves a relative one
    against the server's working directory). With a checkpoint, ``engine.model`` must name it there.
    """
    if checkpoint is not None and engine.model != str(version / CHECKPOINT_DIR):
        raise ValueError(
            f"engine: model '{engine.model}' is not the checkpoint's folder '{version / CHECKPOINT_DIR}'"
        )
    adapters = adapters or {}
    texts = {ENGINE_ARGS_FILE: json.dumps(model_json(engine), indent=2) + "\n"}
    if adapters:
        texts[MULTI_LORA_FILE] = multi_lora_json({a: str(version / adapter_dir(a)) for a in sorted(adapters)})
    files = checkpoint_files(checkpoint) if checkpoint is not None else {}
    return ModelEntry(
        config, artifacts={**files, **adapter_files(adapters)}, sources=dict(sources or {}), texts=texts
    )


def write_local_model(
    model_dir: Path, engine: EngineArgs, settings: ServingSettings | None = None, *,
    checkpoint: Path | None = None, adapters: Mapping[str, Path] | None = None,
) -> Path:  # fmt: skip
    """The folder the build writes for these settings, at ``model_dir``, for tests and benchmarks
    that serve an LLM alone; returns the version folder. Without ``checkpoint``, ``engine.model``
    names the checkpoint wherever it is."""
    entry = vllm_python_model(model_dir.name, engine, settings, checkpoint=checkpoint, adapters=adapters)
    return write_entry(entry, model_dir.parent)


def adapter_dir(name: str) -> str:
    """An adapter's folder, relative to the version folder."""
    return f"{LORA_DIR}/{name}"


def adapter_files(adapters: Mapping[str, Path]) -> dict[str, Path]:
    """Every file of every adapter, by its path in the version folder."""
    return {
        f"{adapter_dir(name)}/{p.relative_to(folder).as_posix()}": p
        for name, folder in sorted(adapters.items())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def serving_settings(spec: LLMSpec) -> ServingSettings:
    lanes: tuple[Lane, ...] = ()
    lane = spec.lanes
    if lane is not None:
        # A request whose max_tokens or whose prompt reaches its threshold goes to the long lane.
        lanes = (
            Lane(
                "long",
                min_max_tokens=lane.min_max_tokens,
                min_prompt_tokens=lane.min_prompt_tokens,
                max_num_seqs=lane.max_num_seqs,
                kv_cache_space_gib=lane.kv_cache_space_gib,
            ),
        )
    lora_names = tuple(sorted(spec.lora.adapters)) if spec.lora is not None else ()
    return ServingSettings(
        max_waiting=spec.admission.max_waiting, lanes=lanes, sampling=spec.sampling, lora_names=lora_names,
        stream_min_gap_ms=spec.streaming.min_gap_ms,
        stream_max_responses_per_s=spec.streaming.max_responses_per_s,
    )  # fmt: skip


def checkpoint_files(checkpoint: Path) -> dict[str, Path]:
    """Every file of the checkpoint, by its path in the version folder."""
    return {
        f"{CHECKPOINT_DIR}/{p.relative_to(checkpoint).as_posix()}": p
        for p in sorted(checkpoint.rglob("*"))
        if p.is_file()
    }
