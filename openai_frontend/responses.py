"""The Triton model's pieces as OpenAI responses (the ``openai`` package's own response types)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from openai.types import Completion as OpenAICompletion
from openai.types import CompletionChoice, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta

from clients.generator import Completion, Piece

from . import logprobs
from .logprobs import Step

Reason = Literal["stop", "length"]
Tagged = tuple[int, Piece]  # a piece of the generation for prompt i (completions take several)


def finish_reason(reason: str | None) -> Reason | None:
    """vLLM's reasons are OpenAI's, but for ``abort`` (a cancelled request: it stopped)."""
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


def choices(piece: Piece, first_index: int = 0) -> list[tuple[int, Completion]]:
    """A piece's completions by choice index (more than one with ``n`` > 1), counted from
    ``first_index`` (prompt i's first choice is i * n, as vLLM numbers them)."""
    first = Completion(piece.text, piece.finish_reason, piece.num_output_tokens, piece.logprobs)
    return [(first_index + i, part) for i, part in enumerate((first, *piece.others))]


@dataclass
class Tally:
    """The token counts of one request's generations (one per prompt, ``n`` choices each), summed
    over their pieces and choices (output counts are deltas), and each choice's text and reason."""

    n: int = 1
    prompts: dict[int, int] = field(default_factory=dict)  # each prompt's input tokens
    completion: int = 0
    reasons: dict[int, str | None] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    steps: dict[int, list[Step]] = field(default_factory=dict)  # each choice's tokens' logprobs

    def add(self, piece: Piece, prompt: int = 0) -> None:
        self.prompts[prompt] = max(self.prompts.get(prompt, 0), piece.num_input_tokens)
        for index, part in choices(piece, prompt * self.n):
            self.completion += part.num_output_tokens
            self.reasons[index] = part.finish_reason or self.reasons.get(index)
            self.texts.setdefault(index, []).append(part.text)
            self.steps.setdefault(index, []).extend(logprobs.steps(part.logprobs))

    def choice(self, index: int) -> tuple[str, Reason]:
        return "".join(self.texts[index]), finish_reason(self.reasons.get(index)) or "stop"

    def usage(self) -> CompletionUsage:
        prompt = sum(self.prompts.values())
        return CompletionUsage(
            prompt_tokens=prompt, completion_tokens=self.completion, total_tokens=prompt + self.completion
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

    def frame(self) -> tuple[str, str]:
        """The text of a streamed chunk's server-sent event before and after its one choice."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        head = f'data: {{"id":{_js(self.id)},"choices":['
        tail = f'],"created":{self.created},"model":{_js(self.model)},"object":"{kind}"}}\n\n'
        return head, tail


def _js(value: str | None) -> str:
    """A JSON string (or null), UTF-8 left as is, as pydantic writes it."""
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


def chunk_event(frame: tuple[str, str], chat: bool, text: str, reason: str | None, first: bool = False,
                index: int = 0) -> str:  # fmt: skip
    """The server-sent event of one streamed chunk without logprobs: the text ``chunk`` dumps
    (``model_dump_json(exclude_unset=True)``), written directly (one per streamed piece)."""
    finish = _js(finish_reason(reason))
    if chat:
        role = ',"role":"assistant"' if first else ""
        choice = f'{{"delta":{{"content":{_js(text)}{role}}},"index":{index},"finish_reason":{finish}}}'
    else:
        choice = f'{{"finish_reason":{finish},"index":{index},"logprobs":null,"text":{_js(text)}}}'
    return frame[0] + choice + frame[1]


def whole(
    env: Envelope,
    pieces: Sequence[Piece | Tagged],
    n: int = 1,
    echo: Sequence[str] = (),
    top: int | None = None,
) -> ChatCompletion | OpenAICompletion:
    """The whole answer; ``echo``: each prompt, put before its choices' texts; ``top``: the
    candidates per token of its logprobs (None: no logprobs)."""  # fmt: skip
    tally = Tally(n)
    for item in pieces:
        prompt, piece = item if isinstance(item, tuple) else (0, item)
        tally.add(piece, prompt)
    indexes = sorted(tally.texts) or [0]
    tally.texts.setdefault(0, [])
    for index in indexes if echo else ():
        tally.texts[index].insert(0, echo[index // n])
    if env.chat:
        made = [tally.choice(i) for i in indexes]
        return ChatCompletion(
            id=env.id, created=env.created, model=env.model, object="chat.completion",
            choices=[Choice(index=i, message=ChatCompletionMessage(role="assistant", content=text),
                            finish_reason=reason, logprobs=_chat_logprobs(tally, i, top))
                     for i, (text, reason) in zip(indexes, made, strict=True)],
            usage=tally.usage(),
        )  # fmt: skip
    return OpenAICompletion(
        id=env.id, created=env.created, model=env.model, object="text_completion",
        choices=[CompletionChoice(index=i, text=text, finish_reason=reason,
                                  logprobs=_completion_logprobs(tally, i, top))
                 for i, (text, reason) in ((i, tally.choice(i)) for i in indexes)],
        usage=tally.usage(),
    )  # fmt: skip


def _chat_logprobs(tally: Tally, index: int, top: int | None) -> logprobs.ChoiceLogprobs | None:
    if top is None:
        return None
    return logprobs.chat(tally.steps.get(index, []), top)


def _completion_logprobs(tally: Tally, index: int, top: int | None) -> logprobs.Logprobs | None:
    return None if top is None else logprobs.completion(tally.steps.get(index, []), top)


def chunk(
    env: Envelope,
    text: str,
    reason: str | None,
    first: bool = False,
    index: int = 0,
    scores: logprobs.ChunkLogprobs | logprobs.Logprobs | None = None,
) -> ChatCompletionChunk | OpenAICompletion:
    """One streamed chunk of choice ``index``: a chat delta (the first one carries the role), or
    a completion's text; ``scores``: the logprobs of its tokens."""  # fmt: skip
    if env.chat:
        delta = ChoiceDelta(role="assistant", content=text) if first else ChoiceDelta(content=text)
        extra = {} if scores is None else {"logprobs": scores}
        return ChatCompletionChunk(
            id=env.id, created=env.created, model=env.model, object="chat.completion.chunk",
            choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish_reason(reason), **extra)],
        )  # fmt: skip
    return OpenAICompletion.model_construct(  # finish_reason is null until the last chunk; the type says not
        id=env.id, created=env.created, model=env.model, object="text_completion",
        choices=[CompletionChoice.model_construct(
            index=index, text=text, finish_reason=finish_reason(reason), logprobs=scores  # type: ignore[arg-type]
        )],
    )  # fmt: skip


def usage_chunk(env: Envelope, usage: CompletionUsage) -> ChatCompletionChunk | OpenAICompletion:
    """The last chunk when ``stream_options.include_usage``: no choices, the whole usage."""
    if env.chat:
        return ChatCompletionChunk(
            id=env.id, created=env.created, model=env.model, object="chat.completion.chunk",
            choices=[], usage=usage,
        )  # fmt: skip
    return OpenAICompletion(
        id=env.id, created=env.created, model=env.model, object="text_completion", choices=[], usage=usage
    )
