"""Log-probabilities: the model's ``logprobs`` output (Triton's vLLM-backend JSON: per generated
token, ``{token_id: {logprob, rank, decoded_token}}``, the generated token first) in OpenAI's shapes,
built as vLLM's own server builds them.

Chat: each token's ``top_logprobs`` are the first ``top_logprobs`` candidates in the engine's order
(the generated token, then the most likely ones); completions: the first ``logprobs + 1``, keyed by
their text, and ``text_offset`` counts from 0 where the choice's text starts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from openai.types.chat import ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import ChoiceLogprobs
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkLogprobs
from openai.types.chat.chat_completion_token_logprob import TopLogprob
from openai.types.completion_choice import Logprobs

from clients.errors import InvalidResponse

__all__ = ["Candidate", "ChoiceLogprobs", "ChunkLogprobs", "Logprobs", "Step"]
__all__ += ["chat", "chat_chunk", "completion", "steps", "text_length"]

FLOOR = -9999.0  # -inf as OpenAI (and vLLM's server) write it
MAX_TOP = 20  # OpenAI's and vLLM's (max_logprobs) maximum


@dataclass(frozen=True)
class Candidate:
    token: str
    logprob: float

    @property
    def bytes(self) -> list[int]:
        return list(self.token.encode("utf-8", errors="replace"))


@dataclass(frozen=True)
class Step:
    """One generated token: itself (``candidates[0]``) and the other candidates the engine kept."""

    candidates: tuple[Candidate, ...]

    @property
    def chosen(self) -> Candidate:
        return self.candidates[0]


def steps(raw: str | None) -> list[Step]:
    """The steps of one piece's ``logprobs`` output; [] for none (not asked, or a quiet piece)."""
    if raw is None:
        return []
    try:
        positions = json.loads(raw)
        return [_step(p) for p in positions or ()]
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise InvalidResponse(f"the model's logprobs output is not its JSON ({exc})") from None


def _step(position: dict[str, dict[str, object]]) -> Step:
    made = [
        Candidate(str(p.get("decoded_token") or ""), max(float(p["logprob"]), FLOOR))  # type: ignore[arg-type]
        for p in position.values()
    ]
    if not made:
        raise IndexError("a token without candidates")
    return Step(tuple(made))


def chat(found: Sequence[Step], top: int) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=_content(found, top))


def chat_chunk(found: Sequence[Step], top: int) -> ChunkLogprobs:
    return ChunkLogprobs(content=_content(found, top))


def _content(found: Sequence[Step], top: int) -> list[ChatCompletionTokenLogprob]:
    return [
        ChatCompletionTokenLogprob(
            token=s.chosen.token, logprob=s.chosen.logprob, bytes=s.chosen.bytes,
            top_logprobs=[TopLogprob(token=c.token, logprob=c.logprob, bytes=c.bytes)
                          for c in s.candidates[:top]],
        )
        for s in found
    ]  # fmt: skip


def completion(found: Sequence[Step], top: int, offset: int = 0) -> Logprobs:
    """``offset``: where the first token's text starts in the choice's text (streamed: the text
    sent before)."""
    offsets = []
    for s in found:
        offsets.append(offset)
        offset += len(s.chosen.token)
    return Logprobs(
        tokens=[s.chosen.token for s in found],
        token_logprobs=[s.chosen.logprob for s in found],
        top_logprobs=[{c.token: c.logprob for c in s.candidates[: top + 1]} for s in found],
        text_offset=offsets,
    )


def text_length(found: Sequence[Step]) -> int:
    return sum(len(s.chosen.token) for s in found)
