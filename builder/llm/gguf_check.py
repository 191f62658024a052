"""The exported checkpoint against its GGUF source read on its own: the ``gguf`` package's reader
and dequantizer, not transformers' GGUF loader, which both the export and the verify stage's
reference model go through. Every tensor's values (after llama.cpp's rotary row order is undone),
the vocabulary and merges, the end-of-sequence id and the chat template must match, so an error of
that loader, which the two sides of the verify stage would share, cannot pass unseen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.spec.llm import LLMDType

# llama.cpp's tensor names for the llama architecture, and transformers' names for them.
TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
ARCHITECTURES = ("llama",)
# How far an exported value may sit from the dequantized one: the rounding of the export's dtype,
# relative to the tensor's largest magnitude.
RELATIVE_TOLERANCE = {LLMDType.FLOAT32: 1e-6, LLMDType.BFLOAT16: 2.0**-7, LLMDType.FLOAT16: 2.0**-10}


@dataclass(frozen=True)
class GGUFAgreement:
    """What was compared, and every mismatch found (none: the export is the GGUF's)."""

    tensors: int
    tokens: int
    merges: int
    mismatches: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return not self.mismatches


def hf_name(name: str) -> str | None:
    """transformers' name of a llama.cpp tensor (None: not one of the llama architecture's)."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    match = BLOCK.match(name)
    if match is None or match.group(2) not in BLOCK_NAMES:
        return None
    layer, part, kind = match.groups()
    return f"model.layers.{layer}.{BLOCK_NAMES[part]}.{kind}"


def unpermute(weight: NDArray[np.float32], heads: int) -> NDArray[np.float32]:
    """Undo llama.cpp's rotary permutation of Q/K rows (its converter interleaves each head's two
    halves; transformers' checkpoints keep them apart)."""
    rows, rest = weight.shape[0], weight.shape[1:]
    return weight.reshape(heads, rows // heads // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape)


def compare(gguf_file: Path, checkpoint: Path, dtype: LLMDType) -> GGUFAgreement:
    """Every tensor, the tokenizer and the chat template of ``checkpoint`` against ``gguf_file``."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_file))
    fields = _Fields(reader)
    mismatches: list[str] = []
    architecture = fields.get("general.architecture")
    if architecture not in ARCHITECTURES:
        return GGUFAgreement(0, 0, 0, (f"architecture {architecture!r}: only {ARCHITECTURES} are read",))
    tensors = _compare_tensors(reader, fields, checkpoint, dtype, mismatches)
    tokens, merges = _compare_tokenizer(fields, checkpoint, mismatches)
    return GGUFAgreement(tensors, tokens, merges, tuple(mismatches))


class _Fields:
    def __init__(self, reader: Any) -> None:
        self.fields = reader.fields

    def get(self, key: str) -> Any:
        field = self.fields.get(key)
        return None if field is None else field.contents()


def _compare_tensors(
    reader: Any, fields: _Fields, checkpoint: Path, dtype: LLMDType, mismatches: list[str]
) -> int:
    from gguf.quants import dequantize

    arch = fields.get("general.architecture")
    heads = {"attn_q": fields.get(f"{arch}.attention.head_count")}
    heads["attn_k"] = fields.get(f"{arch}.attention.head_count_kv") or heads["attn_q"]
    exported = dict(_exported_tensors(checkpoint))
    tolerance = RELATIVE_TOLERANCE[dtype]
    compared = 0
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            mismatches.append(f"tensor {tensor.name}: no transformers name known for it")
            continue
        if name not in exported:
            mismatches.append(f"tensor {tensor.name}: {name} missing from the checkpoint")
            continue
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        values = values.reshape([int(n) for n in reversed(tensor.shape)])
        part = tensor.name.split(".")[2] if tensor.name.startswith("blk.") else ""
        if part in heads:
            values = unpermute(values, int(heads[part]))
        mine = exported[name]
        compared += 1
        if mine.shape != values.shape:
            mismatches.append(f"tensor {name}: shape {mine.shape}, the GGUF's {values.shape}")
            continue
        scale = float(np.abs(values).max()) or 1.0
        worst = float(np.abs(mine - values).max())
        if worst > tolerance * scale:
            mismatches.append(f"tensor {name}: differs by up to {worst:.3g} (largest value {scale:.3g})")
    return compared


def _exported_tensors(checkpoint: Path) -> Iterator[tuple[str, NDArray[np.float32]]]:
    from safetensors import safe_open

    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                yield key, weights.get_tensor(key).float().numpy()


def _compare_tokenizer(fields: _Fields, checkpoint: Path, mismatches: list[str]) -> tuple[int, int]:
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])})
    by_id = {i: token for token, i in vocab.items()}
    tokens = list(fields.get("tokenizer.ggml.tokens") or [])
    differing = [i for i, token in enumerate(tokens) if by_id.get(i) != token]
    if differing or len(by_id) != len(tokens):
        first = differing[0] if differing else min(len(by_id), len(tokens))
        mismatches.append(
            f"vocabulary: {len(differing)} of {len(tokens)} tokens differ (first at id {first}: "
            f"{by_id.get(first)!r}, the GGUF's {tokens[first] if first < len(tokens) else None!r})"
        )
    merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"].get("merges", [])]
    theirs = list(fields.get("tokenizer.ggml.merges") or [])
    if merges != theirs:
        mismatches.append(f"merges: {len(merges)} in the checkpoint, {len(theirs)} in the GGUF, not the same")
    config = json.loads((checkpoint / "tokenizer_config.json").read_text(encoding="utf-8"))
    eos = vocab.get(config.get("eos_token") or "")
    if eos != fields.get("tokenizer.ggml.eos_token_id"):
        mismatches.append(f"eos token id {eos}, the GGUF's {fields.get('tokenizer.ggml.eos_token_id')}")
    template = fields.get("tokenizer.chat_template")
    if template is not None and _chat_template(checkpoint, config) != template:
        mismatches.append("chat template: not the GGUF's tokenizer.chat_template")
    return len(tokens), len(theirs)


def _chat_template(checkpoint: Path, config: dict[str, Any]) -> str | None:
    file = checkpoint / "chat_template.jinja"
    return file.read_text(encoding="utf-8") if file.is_file() else config.get("chat_template")
