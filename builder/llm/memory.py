"""The LLM memory plan: weights + KV cache, from the checkpoint's config sizes.

KV cache per token = 2 (K and V) × layers × KV heads × head size × bytes per element; the
worst case holds ``max_model_len × max_num_seqs`` tokens. Activations are not counted: on
vLLM they are small beside the KV space, which is reserved up front.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class ModelSizes:
    """The sizes of a decoder-only transformer that memory depends on."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position_embeddings: int
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelSizes:
        """From a Hugging Face ``config.json`` (Llama, Mistral, Qwen, SmolLM and kin)."""
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            layers=int(config["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            max_position_embeddings=int(config["max_position_embeddings"]),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        )

    @classmethod
    def from_checkpoint(cls, folder: Path) -> ModelSizes:
        return cls.from_config(json.loads((folder / "config.json").read_text()))

    @property
    def parameters(self) -> int:
        """Parameters of a Llama-style block stack (attention, gated MLP, RMS norms)."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attention + mlp + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tie_word_embeddings else 2)
        return self.layers * per_layer + embeddings + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


class Lever(str, Enum):
    """What to change when the KV space does not hold the spec's limits, in the order to try."""

    MAX_MODEL_LEN = "max_model_len"
    MAX_NUM_SEQS = "max_num_seqs"
    DTYPE = "dtype"
    KV_CACHE_SPACE_GIB = "kv_cache_space_gib"


@dataclass(frozen=True)
class Cut:
    lever: Lever
    value: str  # the value that makes the limits fit
    note: str


@dataclass(frozen=True)
class MemoryPlan:
    dtype_bytes: int
    parameters: int
    weights_bytes: int
    kv_bytes_per_token: int
    max_model_len: int
    max_num_seqs: int
    kv_bytes_at_limits: int  # max_model_len × max_num_seqs tokens
    kv_space_bytes: int
    sequences_that_fit: int  # full-length sequences the KV space holds
    cuts: tuple[Cut, ...]  # empty when the limits fit

    @property
    def fits(self) -> bool:
        return self.kv_bytes_at_limits <= self.kv_space_bytes

    @property
    def one_sequence_gib(self) -> float:
        return self.kv_bytes_per_token * self.max_model_len / GIB

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_space_bytes


def plan(
    sizes: ModelSizes,
    *,
    dtype_bytes: int,
    max_model_len: int,
    max_num_seqs: int,
    kv_space_bytes: int,
    weights_bytes: int | None = None,
) -> MemoryPlan:
    """The plan; ``weights_bytes`` defaults to parameters × dtype bytes."""
    per_token = sizes.kv_bytes_per_token(dtype_bytes)
    at_limits = per_token * max_model_len * max_num_seqs
    fit = kv_space_bytes // (per_token * max_model_len)
    cuts: tuple[Cut, ...] = ()
    if at_limits > kv_space_bytes:
        cuts = _cuts(per_token, dtype_bytes, max_model_len, max_num_seqs, kv_space_bytes)
    return MemoryPlan(
        dtype_bytes=dtype_bytes,
        parameters=sizes.parameters,
        weights_bytes=weights_bytes if weights_bytes is not None else sizes.parameters * dtype_bytes,
        kv_bytes_per_token=per_token,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        kv_bytes_at_limits=at_limits,
        kv_space_bytes=kv_space_bytes,
        sequences_that_fit=int(fit),
        cuts=cuts,
    )


def _cuts(per_token: int, dtype_bytes: int, length: int, seqs: int, space: int) -> tuple[Cut, ...]:
    tokens = space // per_token  # tokens the KV space holds
    out = []
    if tokens // seqs >= 1:
        out.append(Cut(Lever.MAX_MODEL_LEN, str(tokens // seqs), f"{seqs} sequences of that length fit"))
    if tokens // length >= 1:
        out.append(Cut(Lever.MAX_NUM_SEQS, str(tokens // length), "full-length sequences that fit"))
    if dtype_bytes == 4:
        out.append(Cut(Lever.DTYPE, "bfloat16", "halves the KV cache and the weights"))
    need = per_token * length * seqs / GIB
    out.append(Cut(Lever.KV_CACHE_SPACE_GIB, f"{need:.3f}", "KV space that holds the limits as stated"))
    return tuple(out)
