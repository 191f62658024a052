"""What the repository writer needs to serve an LLM.

``EngineArgs`` (from the spec: ``engine_args``) → ``model_json``, the vLLM engine arguments written
to ``<model>/1/model.json`` for either server that runs an LLM: the ``vllm_engine`` Python-backend
model on the CPU and Triton's own vLLM backend on a GPU host (``builder/llm/gpu.py`` makes its
arguments from these, with the spec's ``gpu`` section); ``multi_lora_json`` names the adapters for
both. ``ServingSettings`` → ``local_config``, the decoupled Python-backend ``ModelConfig`` of
``builder/python_models/vllm_engine``, which speaks Triton's vLLM-backend interface. The file names
and parameter keys are the model's contract's (``vllm_engine/contract.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup, ModelTransactionPolicy

from builder.llm.interface import LOCAL_INPUTS, LOCAL_OUTPUTS, add_tensors
from builder.python_models import package
from builder.python_models.vllm_engine.contract import (
    HEALTH_CHECK,
    LANES,
    LORA_NAMES,
    MAX_WAITING,
    SAMPLING_DEFAULTS,
    STREAM_MAX_RESPONSES_PER_S,
    STREAM_MIN_GAP_MS,
)
from builder.spec.llm import LLMDType, LLMSpec, Sampling
from builder.spec.llm import SchedulingPolicy as SchedulingPolicy  # the spec's, re-exported

CHECKPOINT_DIR = "checkpoint"  # the checkpoint's folder in the version folder
LORA_DIR = "loras"  # the adapters' folder in the version folder
MODEL_SOURCE = package("vllm_engine") / "model.py"  # beside it, the modules of its package
GIB = 1 << 30


class Device(str, Enum):
    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class LoRAArgs:
    """vLLM's LoRA engine arguments, as Triton's vLLM backend reads them from model.json."""

    max_lora_rank: int = 16
    max_loras: int = 1

    def __post_init__(self) -> None:
        if self.max_lora_rank < 1 or self.max_loras < 1:
            raise ValueError(f"engine: max_lora_rank and max_loras must be >= 1, got {self}")

    def as_json(self) -> dict[str, Any]:
        return {"enable_lora": True, "max_lora_rank": self.max_lora_rank, "max_loras": self.max_loras}


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM engine's arguments. ``model`` is a checkpoint folder: absolute, or relative to the
    version folder (for example ``checkpoint``, when the build puts it at ``1/checkpoint/``).
    ``enforce_eager`` and ``seed`` None: left to vLLM (on a GPU, its CUDA graphs)."""

    model: str
    dtype: str = "bfloat16"
    max_model_len: int = 2048
    max_num_seqs: int = 16
    device: Device = Device.CPU
    kv_cache_space_gib: float = 1.0  # CPU: KV-cache memory
    gpu_memory_utilization: float = 0.9  # GPU: share of the device's memory vLLM may take
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS
    enforce_eager: bool | None = True
    max_num_batched_tokens: int | None = None
    seed: int | None = 0
    # vLLM's stream_interval: the engine's outputs every this many new tokens. 1 (vLLM's default):
    # the model coalesces what piles up while a response is sent (ServingSettings.stream_min_gap_ms).
    stream_interval: int = 1
    lora: LoRAArgs | None = None  # None: no LoRA adapters (enable_lora left out)
    tensor_parallel_size: int = 1  # GPU: the GPUs one engine spans
    # True: the vllm_engine model's own stat logger feeds Triton's metrics, vLLM's default loggers
    # stay off; Triton's vLLM backend (REPORT_CUSTOM_METRICS) reads vLLM's own stats instead.
    disable_log_stats: bool = True

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("engine: model (the checkpoint folder) is empty")
        for name in ("max_model_len", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"engine: {name} must be at least 1, got {getattr(self, name)}")
        if self.kv_cache_space_gib <= 0:
            raise ValueError(f"engine: kv_cache_space_gib must be > 0, got {self.kv_cache_space_gib}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"engine: gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.tensor_parallel_size < 1:
            raise ValueError(
                f"engine: tensor_parallel_size must be at least 1, got {self.tensor_parallel_size}"
            )
        if self.stream_interval < 1:
            raise ValueError(f"engine: stream_interval must be at least 1, got {self.stream_interval}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError(
                f"engine: max_num_batched_tokens must be at least 1, got {self.max_num_batched_tokens}"
            )


@dataclass(frozen=True)
class Lane:
    """An engine of its own for long jobs: requests whose prompt + max_tokens reach ``min_tokens``,
    whose max_tokens reaches ``min_max_tokens`` or whose prompt reaches ``min_prompt_tokens`` (any
    one given and reached; at least one is needed).

    ``max_num_seqs`` / ``max_waiting`` default to the main engine's / the lane's own max_num_seqs;
    ``kv_cache_space_gib`` to the main engine's KV size; ``cpus`` pins the lane's engine on the CPU
    (``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``"1"``).
    """

    name: str
    min_tokens: int | None = None
    max_num_seqs: int | None = None
    max_waiting: int | None = None
    cpus: str | None = None
    min_max_tokens: int | None = None
    min_prompt_tokens: int | None = None
    kv_cache_space_gib: float | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name == "default":
            raise ValueError(f"lane: name must be set and not 'default', got {self.name!r}")
        thresholds = {"min_tokens": self.min_tokens, "min_max_tokens": self.min_max_tokens}
        thresholds["min_prompt_tokens"] = self.min_prompt_tokens
        if all(v is None for v in thresholds.values()):
            raise ValueError(f"lane '{self.name}': needs min_tokens, min_max_tokens or min_prompt_tokens")
        for key, value in thresholds.items():
            if value is not None and value < 1:
                raise ValueError(f"lane '{self.name}': {key} must be at least 1, got {value}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ValueError(f"lane '{self.name}': max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.max_waiting is not None and self.max_waiting < 0:
            raise ValueError(f"lane '{self.name}': max_waiting must be >= 0, got {self.max_waiting}")
        if self.kv_cache_space_gib is not None and self.kv_cache_space_gib <= 0:
            raise ValueError(
                f"lane '{self.name}': kv_cache_space_gib must be > 0, got {self.kv_cache_space_gib}"
            )

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class ServingSettings:
    """tritonforge's own serving settings, carried as config parameters.

    ``max_waiting``: requests allowed to wait beyond the ``max_num_seqs`` running; a request that
    finds ``max_num_seqs + max_waiting`` in flight is refused at once (None: ``max_num_seqs``).
    ``lanes``: engines of their own for long jobs; ``execution_env``: a conda-pack archive for
    Triton's per-model execution environment; ``sampling``: the defaults of requests that leave
    those values out (None: vLLM's own).
    """

    max_waiting: int | None = None
    lanes: tuple[Lane, ...] = ()
    execution_env: str | None = None
    sampling: Sampling | None = None
    lora_names: tuple[str, ...] = ()  # the adapters of multi_lora.json
    stream_min_gap_ms: int | None = None  # the spec's streaming.min_gap_ms (None, 0: the model's 0)
    # the spec's streaming.max_responses_per_s (None: the model's default for its host; 0: no budget)
    stream_max_responses_per_s: int | None = None

    def __post_init__(self) -> None:
        if self.max_waiting is not None and self.max_waiting < 0:
            raise ValueError(f"serving: max_waiting must be >= 0, got {self.max_waiting}")
        gap = self.stream_min_gap_ms
        if gap is not None and not 0 <= gap <= 1000:
            raise ValueError(f"serving: stream_min_gap_ms must be from 0 to 1000, got {gap}")
        rate = self.stream_max_responses_per_s
        if rate is not None and rate < 0:
            raise ValueError(f"serving: stream_max_responses_per_s must be >= 0, got {rate}")
        names = [lane.name for lane in self.lanes]
        if len(set(names)) != len(names):
            raise ValueError(f"serving: lane names must be unique, got {names}")


def model_json(args: EngineArgs) -> dict[str, Any]:
    """The engine arguments as ``model.json`` holds them (keys of vLLM's ``AsyncEngineArgs``), for
    the device's server: the KV cache's bytes on the CPU, the GPUs' memory share and count on a GPU."""
    gpu = Device(args.device) is Device.GPU
    out: dict[str, Any] = {
        "model": args.model,
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
    }
    if gpu:
        out["gpu_memory_utilization"] = args.gpu_memory_utilization
        out["tensor_parallel_size"] = args.tensor_parallel_size
    out["enable_prefix_caching"] = args.enable_prefix_caching
    out["enable_chunked_prefill"] = args.enable_chunked_prefill
    out["scheduling_policy"] = SchedulingPolicy(args.scheduling_policy).value
    if args.enforce_eager is not None:
        out["enforce_eager"] = args.enforce_eager
    if args.seed is not None:
        out["seed"] = args.seed
    out["disable_log_stats"] = args.disable_log_stats
    if not gpu:
        out["kv_cache_memory_bytes"] = int(args.kv_cache_space_gib * GIB)
    if args.max_num_batched_tokens is not None:
        out["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.stream_interval != 1:  # vLLM's default: left out, for a vLLM without it
        out["stream_interval"] = args.stream_interval
    if args.lora is not None:
        out.update(args.lora.as_json())
    return out


def lora_args(spec: LLMSpec) -> LoRAArgs | None:
    lora = spec.lora
    return None if lora is None else LoRAArgs(max_lora_rank=lora.max_lora_rank, max_loras=lora.batch_loras)


def engine_args(spec: LLMSpec, dtype: LLMDType) -> EngineArgs:
    """The spec's engine on the CPU, reading the checkpoint at ``1/checkpoint/``; ``dtype``: the one
    the verify stage passed (dtype auto's choice)."""
    return EngineArgs(
        model=CHECKPOINT_DIR,  # relative to the version folder
        dtype=dtype.value,
        max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs,
        kv_cache_space_gib=spec.kv_cache_space_gib,
        enable_prefix_caching=spec.enable_prefix_caching,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        scheduling_policy=spec.scheduling_policy,
        lora=lora_args(spec),
    )


def multi_lora_json(paths: Mapping[str, str]) -> str:
    """``multi_lora.json`` (Triton's vLLM backend's file): adapter name -> its folder."""
    return json.dumps(dict(paths), indent=2) + "\n"


def set_lora_names(cfg: ModelConfig, names: Iterable[str]) -> None:
    """The adapters' names as a config parameter, for clients that see only the config (the
    OpenAI endpoint lists them as models); the model checks it against multi_lora.json."""
    cfg.parameters[LORA_NAMES].string_value = json.dumps(list(names))


def local_config(name: str, settings: ServingSettings | None = None) -> ModelConfig:
    """The decoupled Python-backend config serving ``vllm_engine/model.py`` on the CPU."""
    settings = settings or ServingSettings()
    cfg = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=0,  # vLLM batches continuously; Triton must not
        model_transaction_policy=ModelTransactionPolicy(decoupled=True),
        instance_group=[ModelInstanceGroup(kind=ModelInstanceGroup.KIND_CPU, count=1)],
    )
    add_tensors(cfg, LOCAL_INPUTS, LOCAL_OUTPUTS)
    cfg.parameters[HEALTH_CHECK].string_value = "true"
    if settings.max_waiting is not None:
        cfg.parameters[MAX_WAITING].string_value = str(settings.max_waiting)
    if settings.lanes:
        cfg.parameters[LANES].string_value = json.dumps([lane.as_json() for lane in settings.lanes])
    if settings.sampling is not None:
        defaults = json.dumps(settings.sampling.model_dump(mode="json"), sort_keys=True)
        cfg.parameters[SAMPLING_DEFAULTS].string_value = defaults
    if settings.stream_min_gap_ms:  # 0 is the model's own
        cfg.parameters[STREAM_MIN_GAP_MS].string_value = str(settings.stream_min_gap_ms)
    if settings.stream_max_responses_per_s is not None:  # unset: the model's default for its host
        cfg.parameters[STREAM_MAX_RESPONSES_PER_S].string_value = str(settings.stream_max_responses_per_s)
    if settings.execution_env:
        cfg.parameters["EXECUTION_ENV_PATH"].string_value = settings.execution_env
    if settings.lora_names:
        set_lora_names(cfg, settings.lora_names)
    return cfg
