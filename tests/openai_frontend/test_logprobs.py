"""The model's logprobs JSON in OpenAI's chat and completions shapes, as vLLM's server builds them."""

from __future__ import annotations

import json

import pytest

from clients.errors import InvalidResponse
from openai_frontend.logprobs import chat, completion, steps, text_length


def _raw(*tokens: tuple[str, float, list[tuple[str, float]]]) -> str:
    """The model's JSON: per token, the generated one first, then the other candidates."""
    positions = []
    for i, (token, logprob, others) in enumerate(tokens):
        position = {str(100 * i): {"logprob": logprob, "rank": 1, "decoded_token": token}}
        for j, (other, lp) in enumerate(others):
            position[str(100 * i + j + 1)] = {"logprob": lp, "rank": j + 2, "decoded_token": other}
        positions.append(position)
    return json.dumps(positions)


RAW = _raw(("Hello", -0.5, [(" Hi", -1.0), ("Hey", -2.0)]), (" wörld", float("-inf"), [("!", -3.0)]))


def test_steps_keep_the_engines_order_the_generated_token_first() -> None:
    found = steps(RAW)
    assert [s.chosen.token for s in found] == ["Hello", " wörld"]
    assert [c.token for c in found[0].candidates] == ["Hello", " Hi", "Hey"]
    assert found[1].chosen.logprob == -9999.0  # -inf as OpenAI writes it
    assert steps(None) == [] and steps("null") == [] and steps("[]") == []
    assert text_length(found) == len("Hello wörld")


@pytest.mark.parametrize("raw", ["{", "[{}]", '[{"1": {"rank": 1}}]'])
def test_a_malformed_output_is_the_servers_error(raw: str) -> None:
    with pytest.raises(InvalidResponse):
        steps(raw)


def test_chat_shape_top_list_is_the_first_top_candidates() -> None:
    made = chat(steps(RAW), top=2)
    assert made.content is not None
    first = made.content[0]
    assert (first.token, first.logprob, first.bytes) == ("Hello", -0.5, list(b"Hello"))
    assert [t.token for t in first.top_logprobs] == ["Hello", " Hi"]
    assert made.content[1].bytes == list(" wörld".encode())
    assert chat(steps(RAW), top=0).content[0].top_logprobs == []  # type: ignore[index]


def test_completion_shape_has_top_plus_one_candidates_and_text_offsets() -> None:
    made = completion(steps(RAW), top=1, offset=3)
    assert made.tokens == ["Hello", " wörld"]
    assert made.token_logprobs == [-0.5, -9999.0]
    assert made.top_logprobs == [{"Hello": -0.5, " Hi": -1.0}, {" wörld": -9999.0, "!": -3.0}]
    assert made.text_offset == [3, 8]
