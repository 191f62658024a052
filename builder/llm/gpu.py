"""GPU-host entries: a model served by Triton's own vLLM backend (``backend: "vllm"``) in the
``-vllm-python-py3`` tritonserver image, built from the same checkpoint as the CPU engine.

The entry is ``<name>/config.pbtxt`` plus ``<name>/1/model.json`` (vLLM's engine arguments,
read by the backend from the version folder) and ``<name>/1/checkpoint/``. Its engine arguments are
the CPU engine's (``builder.llm.serving.engine_args``) with the spec's ``gpu`` section, and
``model.json`` is written by the same ``model_json``. vLLM resolves the ``model`` path against the
server's working directory, not the version folder, so model.json names the checkpoint where the
image mounts the repository (``mounted_version``), as ``multi_lora.json`` names the adapters.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePosixPath

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup, ModelTransactionPolicy

from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS, add_tensors
from builder.llm.serving import CHECKPOINT_DIR as CHECKPOINT_DIR  # re-exported: deploy reads the checkpoint
from builder.llm.serving import Device, EngineArgs, engine_args
from builder.python_models.vllm_engine.contract import HEALTH_CHECK, LORA_NAMES
from builder.spec.llm import LLMSpec

# Where the image serves the repository from (deploy/entrypoint.sh, TRITONFORGE_REPOSITORY).
DEFAULT_MOUNT = PurePosixPath("/opt/tritonforge/model_repository")


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


def mounted_version(name: str, *, mount: PurePosixPath = DEFAULT_MOUNT) -> PurePosixPath:
    """The entry's version folder where the image mounts the repository: the folder the paths in
    its model.json and multi_lora.json start from."""
    return mount / name / "1"


def gpu_engine_args(spec: LLMSpec) -> EngineArgs:
    """vLLM's engine arguments on the GPU host: the CPU engine's with the spec's ``gpu`` section (its
    dtype, memory share, GPUs and ``max_num_seqs``), the checkpoint under the mount, eager mode and
    seed left to vLLM (CUDA graphs), and vLLM's stats on for the backend's custom metrics."""
    gpu = spec.gpu
    return dataclasses.replace(
        engine_args(spec, gpu.dtype),
        model=str(mounted_version(spec.name) / CHECKPOINT_DIR),
        device=Device.GPU,
        max_num_seqs=spec.gpu_max_num_seqs,
        gpu_memory_utilization=gpu.gpu_memory_utilization,
        tensor_parallel_size=gpu.tensor_parallel_size,
        enforce_eager=None,
        seed=None,
        disable_log_stats=False,
    )
