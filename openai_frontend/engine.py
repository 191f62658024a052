"""What the endpoint asks of the engine behind it (as Triton's own OpenAI frontend has its
``LLMEngine``, r25.10 ``python/openai/openai_frontend/engine/engine.py``), and the names it answers
for. The routes do the OpenAI mapping; an engine lists the served models, streams one request's
responses in the vLLM-backend interface's fields, embeds texts and scores text pairs.
``triton.TritonEngine`` is the one the endpoint serves with (tritonserver's gRPC endpoint); a test
hands ``create_app`` its own.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from clients.generator import Piece

MASK = "attention_mask"  # a tokenizer's output whose row sums are the token counts


@dataclass(frozen=True)
class LLM:
    name: str
    inputs: frozenset[str]
    adapters: tuple[str, ...] = ()  # its LoRA adapters' names
    # Its config's sampling defaults set max_tokens: a request without one gets that, not the
    # context's end.
    limits_output: bool = False

    @property
    def chat(self) -> bool:
        return "messages" in self.inputs


@dataclass(frozen=True)
class Tokenizer:
    """The ensemble step that tokenizes the text: its model, text input and mask output."""

    model: str
    text_input: str
    mask_output: str = MASK


@dataclass(frozen=True)
class Embedder:
    name: str
    text_input: str
    output: str
    dims: int
    batch: int  # the most texts per Triton request (the model's max_batch_size; 0: no batching)
    shape_tail: tuple[int, ...]  # the text input's shape after the batch dimension
    tokenizer: Tokenizer | None = None


@dataclass(frozen=True)
class Reranker:
    """A model that scores (query, document) pairs: a text-ranking pipeline."""

    name: str
    query_input: str  # the first text of each pair
    document_input: str  # the second
    score_output: str
    batch: int  # the most pairs per Triton request (the model's max_batch_size; 0: no batching)
    shape_tail: tuple[int, ...]  # each text input's shape after the batch dimension
    tokens_output: str | None = None  # each pair's tokens before truncation (None: not counted)
    tokenizer: str | None = None  # the ensemble step that tokenizes the pairs
    max_tokens: int | None = None  # the tokens a pair may take (its tokenizer's max_length); None: unknown


@dataclass(frozen=True)
class Catalog:
    """The served models this endpoint answers for, by name."""

    llms: dict[str, LLM] = field(default_factory=dict)
    embedders: dict[str, Embedder] = field(default_factory=dict)
    rerankers: dict[str, Reranker] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """Where a request's ``model`` goes: an LLM, and the adapter (None: the base model)."""

    llm: LLM
    lora_name: str | None = None


class Engine(Protocol):
    """The served models and their answers; errors are the clients' typed errors
    (``clients.errors``), which the routes turn into OpenAI's."""

    async def catalog(self, fresh: bool = False) -> Catalog:
        """The models served (a recent list, or a new one when ``fresh``)."""
        ...

    async def route(self, name: str) -> Route | None:
        """The LLM named ``name``, else the one whose adapter it names; None: no such model."""
        ...

    def pieces(self, model: str, fields: Mapping[str, Any]) -> AsyncGenerator[Piece, None]:
        """The model's responses to one request; closing the iterator cancels the request."""
        ...

    async def embed(self, model: Embedder, texts: Sequence[str]) -> tuple[np.ndarray[Any, Any], list[int]]:
        """The vectors of ``texts`` ([len, D] float32) and each text's token count."""
        ...

    async def rerank(
        self, model: Reranker, pairs: Sequence[tuple[str, str]]
    ) -> tuple[np.ndarray[Any, Any], list[int]]:
        """Each pair's score ([len] float32) and its tokens before truncation (0 each when the model
        does not count them)."""
        ...

    async def close(self) -> None:
        """Let go of what the engine holds (the app's shutdown calls it)."""
        ...
