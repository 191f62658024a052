"""The model's pieces as OpenAI responses: with ``n`` > 1, one choice per completion."""

from __future__ import annotations

from openai.types.chat import ChatCompletion

from builder.openai_frontend.responses import Envelope, Tally, whole
from clients.generator import Completion, Piece


def pieces() -> list[Piece]:
    return [
        Piece(" Par", None, 9, 1, (Completion(" Ly", None, 1),)),
        Piece("is", "stop", 9, 1, (Completion("on", "length", 1),)),
    ]


def test_each_completion_is_a_choice_and_usage_counts_them_all() -> None:
    chat = whole(Envelope.new("smollm2", chat=True), pieces())
    assert isinstance(chat, ChatCompletion)
    assert [(c.index, c.message.content, c.finish_reason) for c in chat.choices] == [
        (0, " Paris", "stop"),
        (1, " Lyon", "length"),
    ]
    assert chat.usage is not None and (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (9, 4)
    text = whole(Envelope.new("smollm2", chat=False), pieces())
    assert [(c.index, c.text) for c in text.choices] == [(0, " Paris"), (1, " Lyon")]


def test_one_completion_is_one_choice() -> None:
    tally = Tally()
    tally.add(Piece("Hi", "stop", 3, 1))
    assert tally.choice(0) == ("Hi", "stop") and sorted(tally.texts) == [0]
