"""The model's pieces as OpenAI responses: with ``n`` > 1, one choice per completion."""

from __future__ import annotations

import itertools

import pytest
from openai.types import Completion as TextCompletion
from openai.types.chat import ChatCompletion

from clients.generator import Completion, Piece
from openai_frontend.responses import Envelope, Tally, chunk, chunk_event, whole


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
    assert isinstance(text, TextCompletion)
    assert [(c.index, c.text) for c in text.choices] == [(0, " Paris"), (1, " Lyon")]


def test_one_completion_is_one_choice() -> None:
    tally = Tally()
    tally.add(Piece("Hi", "stop", 3, 1))
    assert tally.choice(0) == ("Hi", "stop") and sorted(tally.texts) == [0]


def test_several_prompts_number_their_choices_as_vllm_and_sum_usage() -> None:
    """Prompt i's choices are i * n .. i * n + n - 1; echo puts each prompt before its texts."""
    tagged = [
        (1, Piece("B0", "stop", 5, 1, (Completion("B1", "length", 2),))),
        (0, Piece("A0", "stop", 3, 1, (Completion("A1", "stop", 1),))),
    ]
    text = whole(Envelope.new("m", chat=False), tagged, n=2, echo=("a:", "b:"))
    assert isinstance(text, TextCompletion)
    assert [(c.index, c.text) for c in text.choices] == [(0, "a:A0"), (1, "a:A1"), (2, "b:B0"), (3, "b:B1")]
    assert text.usage is not None and (text.usage.prompt_tokens, text.usage.completion_tokens) == (8, 5)


@pytest.mark.parametrize("chat", [True, False])
def test_a_chunk_event_is_the_text_pydantic_writes_for_the_chunk(chat: bool) -> None:
    """Streamed chunks without logprobs are written directly, one per piece: the same bytes as
    ``chunk(...).model_dump_json(exclude_unset=True)`` in a server-sent event."""
    env = Envelope('m"é', chat, "x-1", 5)
    texts = ['hi"\n\t\x01é\u2028😀\\', ""]
    for text, reason, first, index in itertools.product(
        texts, [None, "stop", "length", "abort"], [True, False], [0, 3]
    ):
        made = chunk(env, text, reason, first=first, index=index)
        expected = f"data: {made.model_dump_json(exclude_unset=True)}\n\n"
        assert chunk_event(env.frame(), chat, text, reason, first, index) == expected
