"""The ``llms:`` section of ``models.yaml``: generative models served by vLLM.

Validated like the rest of the spec (every error names file, model and field), but kept
apart from ``builder.spec`` so that the LLM stages need nothing of the ONNX side. The checks
that need the checkpoint's own sizes (``max_model_len`` against the model's context, KV
space against one full-length sequence) are in the check stage.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from builder.errors import SpecError
from builder.spec.kinds import FACTORY_PATTERN, llm_source_kind
from builder.spec.kinds import SourceKind as SourceKind  # re-exported: source_kind is typed with it

NAME_PATTERN = r"^[A-Za-z0-9_-]+$"

Name = Annotated[str, Field(pattern=NAME_PATTERN, min_length=1, max_length=128)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMDType(str, Enum):
    """Weight and activation dtype, as vLLM and transformers spell it."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"

    @property
    def bytes(self) -> int:
        return 4 if self is LLMDType.FLOAT32 else 2


class DTypeSetting(str, Enum):
    """The spec's ``dtype``: one dtype, or ``auto``: the build verifies each of
    ``AUTO_CANDIDATES`` against the source, measures its tokens/s and serves the fastest that
    verified (``builder.llm.choice``)."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


# In order of exactness: a tie in speed goes to the earlier one.
AUTO_CANDIDATES = (LLMDType.FLOAT32, LLMDType.BFLOAT16)


class Engine(str, Enum):
    VLLM = "vllm"


class SchedulingPolicy(str, Enum):
    FCFS = "fcfs"
    PRIORITY = "priority"


class Admission(Strict):
    """Requests allowed to wait beyond the ``max_num_seqs`` running: a request that finds the
    running set and this line full is refused at once, never queued without bound."""

    max_waiting: Annotated[int, Field(ge=0)] = 16


class LongLane(Strict):
    """A second engine instance for long jobs, so short requests' time to first token stays
    bounded while long ones run. A request goes there when its ``max_tokens`` or its prompt
    length reaches a threshold."""

    min_max_tokens: Annotated[int, Field(ge=1)] | None = None
    min_prompt_tokens: Annotated[int, Field(ge=1)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1)] = 4
    kv_cache_space_gib: Annotated[float, Field(gt=0.0)] | None = None  # None: the main lane's

    @model_validator(mode="after")
    def _has_threshold(self) -> LongLane:
        if self.min_max_tokens is None and self.min_prompt_tokens is None:
            raise ValueError("a long-job lane needs min_max_tokens or min_prompt_tokens")
        return self


class Sampling(Strict):
    """Defaults for requests that do not set them."""

    temperature: Annotated[float, Field(ge=0.0)] = 0.7
    top_p: Fraction = 0.95
    max_tokens: Annotated[int, Field(ge=1)] = 128


# Chosen by bench/llm_openai_cpu.py (docs/llm_serving.md): the gap between text updates, time to
# first token and the serving path's CPU per token against vLLM's own server.
STREAM_MIN_GAP_MS = 0


class Streaming(Strict):
    """How a streamed answer goes out: each response as soon as the one before has been sent,
    carrying every token made meanwhile, and no sooner than ``min_gap_ms`` after it (the final
    response never waits). A larger gap sends fewer, larger responses: less CPU per token on the
    serving path, text in coarser steps. ``max_responses_per_s``: the model's streamed responses
    a second, all streams together, past which tokens wait to go together (unset: what the CPUs
    the model runs on can send, docs/llm_serving.md; 0: no budget)."""

    min_gap_ms: Annotated[int, Field(ge=0, le=1000)] = STREAM_MIN_GAP_MS
    max_responses_per_s: Annotated[int, Field(ge=0)] | None = None


PROMPT_GAP_FACTOR = 4.0


class LLMTolerance(Strict):
    """How close the engine's greedy output must stay to the source model's."""

    min_agreement: Annotated[float, Field(ge=0.0, le=1.0)]  # share of prompts whose first N tokens agree
    max_logprob_gap: Annotated[float, Field(ge=0.0)]  # mean |log p engine - log p source| per token
    # The same mean on each prompt alone (None: PROMPT_GAP_FACTOR x max_logprob_gap), so that one
    # prompt cannot drift far while the others hold the mean down.
    max_prompt_logprob_gap: Annotated[float, Field(ge=0.0)] | None = None

    @property
    def prompt_gap(self) -> float:
        if self.max_prompt_logprob_gap is not None:
            return self.max_prompt_logprob_gap
        return PROMPT_GAP_FACTOR * self.max_logprob_gap


class Evaluation(Strict):
    """The held-out prompts (a JSON list of chat conversations under ``calibration/``)."""

    prompts: Annotated[str, Field(min_length=1)]
    count: Annotated[int, Field(ge=1)] = 4  # prompts used by the verify stage, from the start
    tokens: Annotated[int, Field(ge=1)] = 16  # N: greedy tokens compared per prompt
    tolerances: dict[LLMDType, LLMTolerance]

    @model_validator(mode="after")
    def _under_calibration(self) -> Evaluation:
        parts = Path(self.prompts).parts
        if not parts or parts[0] != "calibration" or ".." in parts:
            raise ValueError(f"'{self.prompts}' must be a file under calibration/")
        return self


class GpuTarget(Strict):
    """What the GPU-host entries (Triton's own vLLM backend) get. ``dtype`` defaults to float16:
    vLLM refuses bfloat16 below compute capability 8.0 and the serving image runs on 7.5+. One
    fixed dtype (not vLLM's ``auto``, which varies with the GPU), with a tolerance of its own."""

    dtype: LLMDType = LLMDType.FLOAT16
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    gpu_memory_utilization: Fraction = 0.9
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None  # None: the spec's


# The ranks vLLM's LoRAConfig takes for max_lora_rank.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class LoRA(Strict):
    """PEFT LoRA adapters served beside the base model, as Triton's vLLM backend serves them
    (``enable_lora`` in model.json, ``multi_lora.json`` naming each adapter's folder). Each
    adapter is a folder relative to models.yaml or a ``pkg.mod:fn`` factory returning one."""

    adapters: Annotated[dict[Name, Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    max_lora_rank: int = 16
    max_loras: Annotated[int, Field(ge=1)] | None = None  # adapters in one batch (None: all of them)

    @model_validator(mode="after")
    def _rank_known(self) -> LoRA:
        if self.max_lora_rank not in LORA_RANKS:
            raise ValueError(
                f"max_lora_rank {self.max_lora_rank} is not one vLLM takes "
                f"({', '.join(map(str, LORA_RANKS))})"
            )
        return self

    @property
    def batch_loras(self) -> int:
        return self.max_loras or len(self.adapters)

    @staticmethod
    def is_factory(ref: str) -> bool:
        return bool(FACTORY_PATTERN.match(ref))


class LLMSpec(Strict):
    """One generative model: a source, the vLLM engine's settings, verification, GPU entries."""

    name: Name
    source: Annotated[str, Field(min_length=1)]
    engine: Engine = Engine.VLLM
    dtype: DTypeSetting = DTypeSetting.AUTO
    max_model_len: Annotated[int, Field(ge=16)] = 2048
    max_num_seqs: Annotated[int, Field(ge=1)] = 16
    kv_cache_space_gib: Annotated[float, Field(gt=0.0)] = 1.0  # CPU engines
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS
    admission: Admission = Admission()
    lanes: LongLane | None = None
    sampling: Sampling = Sampling()
    streaming: Streaming = Streaming()
    evaluation: Evaluation
    gpu: GpuTarget = GpuTarget()
    lora: LoRA | None = None
    _source_kind: SourceKind = PrivateAttr()

    @property
    def candidates(self) -> tuple[LLMDType, ...]:
        """The dtypes the verify stage tries: ``AUTO_CANDIDATES`` for auto, else the one set."""
        if self.dtype is DTypeSetting.AUTO:
            return AUTO_CANDIDATES
        return (LLMDType(self.dtype.value),)

    @property
    def widest_dtype(self) -> LLMDType:
        """The candidate with the most bytes. The export writes its weights in it (vLLM casts them
        to any other candidate at load, with no second rounding), and memory plans made before
        the choice count with it, so that they hold whichever candidate is served."""
        return max(self.candidates, key=lambda d: d.bytes)

    @property
    def gpu_max_num_seqs(self) -> int:
        """The requests vLLM runs at once on a GPU host (``max_num_seqs`` of the gpu entry, else the
        spec's): beyond them, requests wait in its scheduler."""
        return self.gpu.max_num_seqs or self.max_num_seqs

    @property
    def source_kind(self) -> SourceKind:
        """Recorded when the entry was validated (builder/spec/kinds.py)."""
        return self._source_kind

    @model_validator(mode="after")
    def _consistent(self) -> LLMSpec:
        self._source_kind = llm_source_kind(self.source)
        if self.sampling.max_tokens >= self.max_model_len:
            raise ValueError(
                f"sampling.max_tokens {self.sampling.max_tokens} leaves no room for a prompt "
                f"within max_model_len {self.max_model_len}"
            )
        for dtype in (*self.candidates, self.gpu.dtype):
            if dtype not in self.evaluation.tolerances:
                why = " (dtype auto verifies float32 and bfloat16)" if self.dtype is DTypeSetting.AUTO else ""
                raise ValueError(f"evaluation.tolerances has no entry for dtype {dtype.value}{why}")
        lane = self.lanes
        if lane is not None:
            for field in ("min_max_tokens", "min_prompt_tokens"):
                value = getattr(lane, field)
                if value is not None and value >= self.max_model_len:
                    raise ValueError(
                        f"lanes.{field} {value} is not below max_model_len {self.max_model_len}: "
                        "no request would reach the long lane"
                    )
        if self.lora is not None and self.name in self.lora.adapters:
            raise ValueError(f"lora.adapters: '{self.name}' is the model's own name")
        return self


def parse_llm(raw: Any, *, file: str | Path, index: int = 0) -> LLMSpec:
    """Validate one ``llms:`` entry; raise SpecError naming file, model and dotted field."""
    try:
        return LLMSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = raw.get("name") if isinstance(raw, dict) else None
        model = name if isinstance(name, str) else f"llms[{index}]"
        field = ".".join(str(p) for p in err["loc"]) or None
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            value = err.get("input")
            if err["type"] != "value_error" and isinstance(value, (str, int, float)):
                message = f"{message} (got {value!r})"
        raise SpecError(message, file=file, model=model, field=field) from None
