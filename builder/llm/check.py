"""Check stage: the exported checkpoint loads (config, tokenizer, chat template) and the sizes
the spec states fit it: ``max_model_len`` within the model's context, and a KV space that
holds at least one sequence of ``max_model_len`` tokens."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from builder.errors import SpecError
from builder.llm.memory import GIB, MemoryPlan, ModelSizes, plan
from builder.spec.llm import LLMSpec

PROBE = [{"role": "user", "content": "Hello"}]


@dataclass(frozen=True)
class CheckedCheckpoint:
    folder: Path
    architecture: str
    sizes: ModelSizes
    memory: MemoryPlan  # at the spec's CPU limits
    eos_token: str


def check_checkpoint(folder: Path, spec: LLMSpec, *, file: Path | str) -> CheckedCheckpoint:
    """Load what vLLM will load and hold the spec's sizes against the checkpoint's."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoTokenizer

    def fail(message: str, field: str | None = None) -> SpecError:
        return SpecError(message, file=file, model=spec.name, field=field)

    try:
        config = AutoConfig.from_pretrained(str(folder))
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise fail(f"checkpoint '{folder}' does not load: {_first_line(exc)}", "source") from None
    if not tokenizer.chat_template:
        raise fail(f"checkpoint '{folder}' has no chat template", "source")
    try:
        rendered = tokenizer.apply_chat_template(PROBE, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # jinja errors have no common base worth naming
        raise fail(f"the chat template of '{folder}' does not render: {_first_line(exc)}", "source") from None
    if "Hello" not in str(rendered):
        raise fail(f"the chat template of '{folder}' drops the message text", "source")

    sizes = ModelSizes.from_config(config.to_dict())
    if spec.max_model_len > sizes.max_position_embeddings:
        raise fail(
            f"{spec.max_model_len} is above the model's context of {sizes.max_position_embeddings} tokens "
            "(max_position_embeddings)",
            "max_model_len",
        )
    memory = cpu_plan(sizes, spec)
    if memory.sequences_that_fit < 1:
        raise fail(
            f"{spec.kv_cache_space_gib} GiB cannot hold one sequence of max_model_len "
            f"{spec.max_model_len} tokens: that needs {memory.one_sequence_gib:.3f} GiB "
            f"({memory.kv_bytes_per_token} bytes per token)",
            "kv_cache_space_gib",
        )
    if spec.lanes is not None and spec.lanes.kv_cache_space_gib is not None:
        lane = plan(
            sizes,
            dtype_bytes=spec.widest_dtype.bytes,
            max_model_len=spec.max_model_len,
            max_num_seqs=spec.lanes.max_num_seqs,
            kv_space_bytes=int(spec.lanes.kv_cache_space_gib * GIB),
        )
        if lane.sequences_that_fit < 1:
            raise fail(
                f"{spec.lanes.kv_cache_space_gib} GiB cannot hold one sequence of max_model_len "
                f"{spec.max_model_len} tokens: that needs {lane.one_sequence_gib:.3f} GiB",
                "lanes.kv_cache_space_gib",
            )
    architecture = (config.architectures or [type(config).__name__])[0]
    return CheckedCheckpoint(folder, architecture, sizes, memory, str(tokenizer.eos_token))


def cpu_plan(sizes: ModelSizes, spec: LLMSpec, *, weights_bytes: int | None = None) -> MemoryPlan:
    """The memory plan of the spec's CPU engine (the main lane)."""
    return plan(
        sizes,
        dtype_bytes=spec.widest_dtype.bytes,
        max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs,
        kv_space_bytes=int(spec.kv_cache_space_gib * GIB),
        weights_bytes=weights_bytes,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
