"""GPU-host entries: a model served by Triton's own vLLM backend (``backend: "vllm"``) in the
``-vllm-python-py3`` tritonserver image, built from the same checkpoint as the CPU engine.

The entry is ``<name>/config.pbtxt`` plus ``<name>/1/model.json`` (vLLM's engine arguments,
read by the backend from the version folder) and ``<name>/1/checkpoint/``. vLLM resolves the
``model`` path against the server's working directory, not the version folder, so model.json
names the checkpoint where the image mounts the repository.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup, ModelTransactionPolicy

from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS, add_tensors
from builder.llm.serving import LORA_DIR
from builder.python_models.vllm_engine.contract import (
    ENGINE_ARGS_FILE,
    HEALTH_CHECK,
    LORA_NAMES,
    MULTI_LORA_FILE,
)
from builder.spec.llm import LLMSpec

CHECKPOINT_DIR = "checkpoint"
# Where the image serves the repository from (deploy/entrypoint.sh, TRITONFORGE_REPOSITORY).
DEFAULT_MOUNT = PurePosixPath("/opt/tritonforge/model_repository")

JsonValue = str | int | float | bool


def gpu_config(spec: LLMSpec) -> ModelConfig:
    """Decoupled, no Triton batching (vLLM batches continuously), devices left to vLLM."""
    cfg = ModelConfig(
        name=spec.name,
        backend="vllm",
        max_batch_size=0,
        model_transaction_policy=ModelTransactionPolicy(decoupled=True),
        instance_group=[ModelInstanceGroup(kind=ModelInstanceGroup.KIND_MODEL, count=1)],
    )
    add_tensors(cfg, BACKEND_INPUTS, BACKEND_OUTPUTS)
    # vLLM's engine statistics as Triton custom metrics (needs disable_log_stats false).
    cfg.parameters["REPORT_CUSTOM_METRICS"].string_value = "true"
    cfg.parameters[HEALTH_CHECK].string_value = "true"
    if spec.lora is not None:  # a parameter that backend ignores; the OpenAI endpoint reads it
        cfg.parameters[LORA_NAMES].string_value = json.dumps(sorted(spec.lora.adapters))
    return cfg


def gpu_multi_lora(spec: LLMSpec, *, mount: PurePosixPath = DEFAULT_MOUNT) -> dict[str, str]:
    """``multi_lora.json`` for Triton's vLLM backend: it hands each path to vLLM as written, and
    vLLM resolves a relative one against the server's working directory, so the paths are
    absolute, under the repository's mount (as model.json's ``model``)."""
    assert spec.lora is not None
    version = mount / spec.name / "1"
    return {name: str(version / LORA_DIR / name) for name in sorted(spec.lora.adapters)}


def gpu_model_json(spec: LLMSpec, *, mount: PurePosixPath = DEFAULT_MOUNT) -> dict[str, JsonValue]:
    """vLLM's ``AsyncEngineArgs`` for the GPU host, from the spec's ``gpu`` section."""
    gpu = spec.gpu
    lora: dict[str, JsonValue] = {}
    if spec.lora is not None:
        lora = {"enable_lora": True, "max_lora_rank": spec.lora.max_lora_rank,
                "max_loras": spec.lora.batch_loras}  # fmt: skip
    return {
        "model": str(mount / spec.name / "1" / CHECKPOINT_DIR),
        "dtype": gpu.dtype.value,
        "max_model_len": spec.max_model_len,
        "max_num_seqs": spec.gpu_max_num_seqs,
        "gpu_memory_utilization": gpu.gpu_memory_utilization,
        "tensor_parallel_size": gpu.tensor_parallel_size,
        "enable_prefix_caching": spec.enable_prefix_caching,
        "enable_chunked_prefill": spec.enable_chunked_prefill,
        "scheduling_policy": spec.scheduling_policy.value,
        "disable_log_stats": False,
        **lora,
    }


def write_gpu_entry(
    spec: LLMSpec, checkpoint: Path, repo: Path, *, mount: PurePosixPath = DEFAULT_MOUNT,
    adapters: Mapping[str, Path] | None = None,
) -> Path:  # fmt: skip
    """Write ``repo/<name>/`` (config, model.json, a copy of the checkpoint and, for a spec with
    ``lora:``, of each of ``adapters``' folders with multi_lora.json); return that folder."""
    entry = repo / spec.name
    version = entry / "1"
    shutil.rmtree(entry, ignore_errors=True)
    version.mkdir(parents=True)
    (entry / "config.pbtxt").write_text(text_format.MessageToString(gpu_config(spec)))
    (version / ENGINE_ARGS_FILE).write_text(json.dumps(gpu_model_json(spec, mount=mount), indent=2) + "\n")
    shutil.copytree(checkpoint, version / CHECKPOINT_DIR)
    if spec.lora is not None:
        missing = sorted(set(spec.lora.adapters) - set(adapters or {}))
        if missing:
            raise ValueError(f"{spec.name}: no folder given for adapter(s) {', '.join(missing)}")
        for name in sorted(spec.lora.adapters):
            shutil.copytree((adapters or {})[name], version / LORA_DIR / name)
        (version / MULTI_LORA_FILE).write_text(json.dumps(gpu_multi_lora(spec, mount=mount), indent=2) + "\n")
    return entry
