"""An LLM as the ``vllm_engine`` Python-backend model: vLLM's engine inside tritonserver, with
the interface of Triton's vLLM backend (the local and cpu targets serve LLMs this way)."""

from __future__ import annotations

import json
from pathlib import Path

from builder.llm.serving import (
    ENGINE_ARGS_FILE,
    MODEL_SOURCE,
    EngineArgs,
    Lane,
    ServingSettings,
    local_config,
    model_json,
)
from builder.records import LLMBuild
from builder.spec.llm import LLMSpec
from builder.targets.base import ModelEntry

CHECKPOINT_DIR = "checkpoint"


def vllm_python_entry(build: LLMBuild) -> ModelEntry:
    """Config, ``1/model.py``, ``1/model.json`` and the checkpoint under ``1/checkpoint/``."""
    spec = build.spec
    args = engine_args(spec)
    return ModelEntry(
        local_config(spec.name, serving_settings(spec)),
        artifacts=checkpoint_files(build.checkpoint),
        sources={"model.py": MODEL_SOURCE},
        texts={ENGINE_ARGS_FILE: json.dumps(model_json(args), indent=2) + "\n"},
    )


def engine_args(spec: LLMSpec) -> EngineArgs:
    return EngineArgs(
        model=CHECKPOINT_DIR,  # relative to the version folder
        dtype=spec.dtype.value,
        max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs,
        kv_cache_space_gib=spec.kv_cache_space_gib,
        enable_prefix_caching=spec.enable_prefix_caching,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        scheduling_policy=spec.scheduling_policy,
    )


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
    return ServingSettings(max_waiting=spec.admission.max_waiting, lanes=lanes, sampling=spec.sampling)


def checkpoint_files(checkpoint: Path) -> dict[str, Path]:
    """Every file of the checkpoint, by its path in the version folder."""
    return {
        f"{CHECKPOINT_DIR}/{p.relative_to(checkpoint).as_posix()}": p
        for p in sorted(checkpoint.rglob("*"))
        if p.is_file()
    }
