"""The Triton model's pieces as OpenAI responses (the ``openai`` package's own response types)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from openai.types import Completion, CompletionChoice, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta

from clients.generator import Piece

Reason = Literal["stop", "length"]


def finish_reason(reason: str | None) -> Reason | None:
    """vLLM's reasons are OpenAI's, but for ``abort`` (a cancelled request: it stopped)."""
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


@dataclass
class Tally:
    """The token counts of one generation, summed over its pieces (output counts are deltas)."""

    prompt: int = 0
    completion: int = 0
    reason: str | None = None
    texts: list[str] = field(default_factory=list)

    def add(self, piece: Piece) -> None:
        self.prompt = max(self.prompt, piece.num_input_tokens)
        self.completion += piece.num_output_tokens
        self.reason = piece.finish_reason or self.reason
        self.texts.append(piece.text)

    def usage(self) -> CompletionUsage:
        total = self.prompt + self.completion
        return CompletionUsage(
            prompt_tokens=self.prompt, completion_tokens=self.completion, total_tokens=total
        )


@dataclass(frozen=True)
class Envelope:
    """What every response and chunk of one request shares."""

    model: str
    chat: bool
    id: str = ""
    created: int = 0

    @classmethod
    def new(cls, model: str, chat: bool) -> Envelope:
        prefix = "chatcmpl" if chat else "cmpl"
        return cls(model, chat, f"{prefix}-{uuid.uuid4().hex}", int(time.time()))


def whole(env: Envelope, pieces: Sequence[Piece]) -> ChatCompletion | Completion:
    tally = Tally()
    for piece in pieces:
        tally.add(piece)
    text, reason = "".join(tally.texts), finish_reason(tally.reason) or "stop"
    if env.chat:
        message = ChatCompletionMessage(role="assistant", content=text)
        return ChatCompletion(
            id=env.id, created=env.created, model=env.model, object="chat.completion",
            choices=[Choice(index=0, message=message, finish_reason=reason)], usage=tally.usage(),
        )  # fmt: skip
    return Completion(
        id=env.id, created=env.created, model=env.model, object="text_completion",
        choices=[CompletionChoice(index=0, text=text, finish_reason=reason)], usage=tally.usage(),
    )  # fmt: skip


def chunk(
    env: Envelope, text: str, reason: str | None, first: bool = False
) -> ChatCompletionChunk | Completion:
    """One streamed chunk: a chat delta (the first one carries the role), or a completion's text."""
    if env.chat:
        delta = ChoiceDelta(role="assistant", content=text) if first else ChoiceDelta(content=text)
        return ChatCompletionChunk(
            id=env.id, created=env.created, model=env.model, object="chat.completion.chunk",
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish_reason(reason))],
        )  # fmt: skip
    return Completion.model_construct(  # finish_reason is null until the last chunk; the type says not
        id=env.id, created=env.created, model=env.model, object="text_completion",
        choices=[CompletionChoice.model_construct(
            index=0, text=text, finish_reason=finish_reason(reason), logprobs=None  # type: ignore[arg-type]
        )],
    )  # fmt: skip


def usage_chunk(env: Envelope, usage: CompletionUsage) -> ChatCompletionChunk | Completion:
    """The last chunk when ``stream_options.include_usage``: no choices, the whole usage."""
    if env.chat:
        return ChatCompletionChunk(
            id=env.id, created=env.created, model=env.model, object="chat.completion.chunk",
            choices=[], usage=usage,
        )  # fmt: skip
    return Completion(
        id=env.id, created=env.created, model=env.model, object="text_completion", choices=[], usage=usage
    )
