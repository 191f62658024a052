"""Which served models are rerankers, read from their Triton config, as ``embedders`` finds the
embedding models.

A reranker scores text pairs: exactly two ``TYPE_STRING`` inputs of one text per item (``[1]``;
``[-1]`` without batching), the query's first and the document's second, as the config lists them;
exactly one FP32 output of one number per item (the score); and at most one INT64 output of one
number per item (each pair's tokens before truncation, for ``usage`` and the length check). A
Hugging Face ``text-ranking`` checkpoint's ``<name>_pipeline`` qualifies (TEXT, TEXT_PAIR -> SCORE,
NUM_TOKENS). An ensemble names the step that tokenizes the pair (the step fed both inputs), whose
``max_length`` parameter is the tokens a pair may take (``max_length``, read by the engine).
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from .engine import Reranker

MAX_LENGTH = "max_length"  # a tokenizer step's parameter: the tokens it keeps of a pair


def reranker(config: Any) -> Reranker | None:
    """The reranker a Triton ``ModelConfig`` describes, or None if it is no such model."""
    if config.model_transaction_policy.decoupled or len(config.input) != 2:
        return None
    if any(i.data_type != mc.TYPE_STRING for i in config.input):
        return None
    tails = {_tail(list(i.dims), config.max_batch_size) for i in config.input}
    if len(tails) != 1 or None in tails:
        return None
    scores = [o for o in config.output if o.data_type == mc.TYPE_FP32 and _one(o, config.max_batch_size)]
    counts = [o for o in config.output if o.data_type == mc.TYPE_INT64 and _one(o, config.max_batch_size)]
    if len(scores) != 1 or len(counts) > 1 or len(config.output) != len(scores) + len(counts):
        return None
    query, document = (i.name for i in config.input)
    tail = tails.pop()
    assert tail is not None
    return Reranker(
        config.name, query, document, scores[0].name, config.max_batch_size, tail,
        counts[0].name if counts else None, _tokenizer(config, {query, document}),
    )  # fmt: skip


def max_length(config: Any) -> int | None:
    """A tokenizer step's ``max_length`` parameter, if it has a positive one."""
    text = config.parameters[MAX_LENGTH].string_value if MAX_LENGTH in config.parameters else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _tail(dims: list[int], max_batch_size: int) -> tuple[int, ...] | None:
    if max_batch_size > 0:
        return (1,) if dims == [1] else None
    return tuple(dims[1:]) if dims in ([-1], [-1, 1]) else None


def _one(output: Any, max_batch_size: int) -> bool:
    dims = list(output.dims)
    return dims == [1] if max_batch_size > 0 else dims in ([-1], [-1, 1])


def _tokenizer(config: Any, texts: set[str]) -> str | None:
    for step in config.ensemble_scheduling.step:
        if texts <= set(step.input_map.values()):
            return str(step.model_name)
    return None
