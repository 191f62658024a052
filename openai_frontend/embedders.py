"""Which served models are text-embedding models, read from their Triton config.

An embedding model takes UTF-8 text and returns one FP32 vector per text: exactly one
``TYPE_STRING`` input, FP32 outputs only, and exactly one of them a vector (per item ``[D]``;
``[-1, D]`` without batching). The zoo's ``minilm_embed`` and a Hugging Face feature-extraction
checkpoint's ``<name>_pipeline`` qualify. An ensemble qualifies only when a step tokenizes its text
(a step fed the text input that returns ``attention_mask``): the step that tells text from image
bytes, and the one that counts the tokens of ``usage``. A config parameter ``openai_embedding``
naming the output marks a model so whatever its outputs.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from .engine import MASK, Embedder, Tokenizer

MARKER = "openai_embedding"  # config parameter: the output that holds the embedding


def embedder(config: Any) -> Embedder | None:
    """The embedding model a Triton ``ModelConfig`` describes, or None if it is no such model."""
    if config.model_transaction_policy.decoupled:
        return None
    texts = [i for i in config.input if i.data_type == mc.TYPE_STRING]
    if len(config.input) != 1 or len(texts) != 1:
        return None
    tail = _text_tail(list(texts[0].dims), config.max_batch_size)
    output = _output(config)
    if tail is None or output is None:
        return None
    tokenizer = _tokenizer(config, texts[0].name)
    if config.platform == "ensemble" and tokenizer is None and MARKER not in config.parameters:
        return None
    name, dims = output
    return Embedder(config.name, texts[0].name, name, dims, config.max_batch_size, tail, tokenizer)


def _text_tail(dims: list[int], max_batch_size: int) -> tuple[int, ...] | None:
    if max_batch_size > 0:
        return (1,) if dims == [1] else None
    return tuple(dims[1:]) if dims in ([-1], [-1, 1]) else None


def _vector_dims(dims: list[int], max_batch_size: int) -> int | None:
    per_item = dims if max_batch_size > 0 else dims[1:] if dims[:1] == [-1] else []
    return per_item[0] if len(per_item) == 1 and per_item[0] > 0 else None


def _output(config: Any) -> tuple[str, int] | None:
    marked = config.parameters[MARKER].string_value if MARKER in config.parameters else ""
    vectors = []
    for out in config.output:
        if out.data_type != mc.TYPE_FP32:
            if not marked:
                return None
            continue
        dims = _vector_dims(list(out.dims), config.max_batch_size)
        if dims is not None and (not marked or out.name == marked):
            vectors.append((out.name, dims))
    return vectors[0] if len(vectors) == 1 else None


def _tokenizer(config: Any, text: str) -> Tokenizer | None:
    for step in config.ensemble_scheduling.step:
        fed = [name for name, tensor in step.input_map.items() if tensor == text]
        if fed and MASK in step.output_map:
            return Tokenizer(step.model_name, fed[0])
    return None
