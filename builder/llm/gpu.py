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
from pathlib import Path, PurePosixPath

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelInput,
    ModelInstanceGroup,
    ModelOutput,
    ModelTransactionPolicy,
)

from builder.spec.llm import LLMSpec

ENGINE_ARGS_FILE = "model.json"
CHECKPOINT_DIR = "checkpoint"
# Where the image serves the repository from (deploy/entrypoint.sh, TRITONFORGE_REPOSITORY).
DEFAULT_MOUNT = PurePosixPath("/opt/tritonforge/model_repository")

JsonValue = str | int | float | bool

_STRING, _BOOL, _FP32, _UINT32 = (
    DataType.Value(t) for t in ("TYPE_STRING", "TYPE_BOOL", "TYPE_FP32", "TYPE_UINT32")
)
# The text-model interface of Triton's vLLM backend (its auto_complete_config), written out so
# that the server validates it before the backend loads.
INPUTS: tuple[tuple[str, int, bool], ...] = (
    ("text_input", _STRING, False),
    ("stream", _BOOL, True),
    ("sampling_parameters", _STRING, True),
    ("exclude_input_in_output", _BOOL, True),
    ("return_finish_reason", _BOOL, True),
    ("return_cumulative_logprob", _BOOL, True),
    ("return_logprobs", _BOOL, True),
    ("return_num_input_tokens", _BOOL, True),
    ("return_num_output_tokens", _BOOL, True),
)
OUTPUTS: tuple[tuple[str, int, list[int]], ...] = (
    ("text_output", _STRING, [-1]),
    ("finish_reason", _STRING, [-1]),
    ("cumulative_logprob", _FP32, [-1]),
    ("logprobs", _STRING, [-1]),
    ("num_input_tokens", _UINT32, [1]),
    ("num_output_tokens", _UINT32, [-1]),
)


def gpu_config(spec: LLMSpec) -> ModelConfig:
    """Decoupled, no Triton batching (vLLM batches continuously), devices left to vLLM."""
    cfg = ModelConfig(
        name=spec.name,
        backend="vllm",
        max_batch_size=0,
        model_transaction_policy=ModelTransactionPolicy(decoupled=True),
        instance_group=[ModelInstanceGroup(kind=ModelInstanceGroup.KIND_MODEL, count=1)],
    )
    for name, dtype, optional in INPUTS:
        cfg.input.append(ModelInput(name=name, data_type=dtype, dims=[1], optional=optional))
    for name, dtype, dims in OUTPUTS:
        cfg.output.append(ModelOutput(name=name, data_type=dtype, dims=dims))
    # vLLM's engine statistics as Triton custom metrics (needs disable_log_stats false).
    cfg.parameters["REPORT_CUSTOM_METRICS"].string_value = "true"
    return cfg


def gpu_model_json(spec: LLMSpec, *, mount: PurePosixPath = DEFAULT_MOUNT) -> dict[str, JsonValue]:
    """vLLM's ``AsyncEngineArgs`` for the GPU host, from the spec's ``gpu`` section."""
    gpu = spec.gpu
    return {
        "model": str(mount / spec.name / "1" / CHECKPOINT_DIR),
        "dtype": gpu.dtype.value,
        "max_model_len": spec.max_model_len,
        "max_num_seqs": gpu.max_num_seqs or spec.max_num_seqs,
        "gpu_memory_utilization": gpu.gpu_memory_utilization,
        "tensor_parallel_size": gpu.tensor_parallel_size,
        "enable_prefix_caching": spec.enable_prefix_caching,
        "enable_chunked_prefill": spec.enable_chunked_prefill,
        "scheduling_policy": spec.scheduling_policy.value,
        "disable_log_stats": False,
    }


def write_gpu_entry(
    spec: LLMSpec, checkpoint: Path, repo: Path, *, mount: PurePosixPath = DEFAULT_MOUNT
) -> Path:
    """Write ``repo/<name>/`` (config, model.json, a copy of the checkpoint); return that folder."""
    entry = repo / spec.name
    version = entry / "1"
    shutil.rmtree(entry, ignore_errors=True)
    version.mkdir(parents=True)
    (entry / "config.pbtxt").write_text(text_format.MessageToString(gpu_config(spec)))
    (version / ENGINE_ARGS_FILE).write_text(json.dumps(gpu_model_json(spec, mount=mount), indent=2) + "\n")
    shutil.copytree(checkpoint, version / CHECKPOINT_DIR)
    return entry
