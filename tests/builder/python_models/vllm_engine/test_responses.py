"""The vllm_engine model's responses (utils/responses.py), as Triton's vLLM backend makes them.
``n`` > 1: every response has one element per completion in each output, in index order, also when
vLLM streams only the completions that have new tokens; logprobs as JSON per response; the pieces a
stream coalesces merged into one. Test doubles stand for pb_utils and vLLM's outputs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace as NS
from typing import Any

import numpy as np
import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils.responses import Quiet, logprob_outputs, merged, output_response
from tests.builder.python_models.vllm_engine.doubles import use_fake_pb_utils

ALL = {"return_finish_reason", "return_num_output_tokens", "return_cumulative_logprob", "return_logprobs"}
WANTED = frozenset({"text_output", "finish_reason", "num_output_tokens", "cumulative_logprob", "logprobs"})


@pytest.fixture(autouse=True)
def fake_pb_utils(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    use_fake_pb_utils(monkeypatch)
    yield


def job(n: int, stream: bool, logprobs: int | None = None) -> m.Job:
    parsed = m.Parsed("Hi", None, stream, stream, ALL, {}, 0)
    lane = m.Lane(m.LaneRule("default"), 4, m.Metrics(None, {}))
    return m.Job(None, parsed, "Hi", [1, 2], NS(logprobs=logprobs), lane, WANTED, n=n)


def piece(index: int, text: str, tokens: int, reason: str | None = None, logprob: float = -1.0) -> Any:
    positions = [{5: NS(logprob=logprob, rank=1, decoded_token=text)}] * tokens
    return NS(index=index, text=text, token_ids=[5] * tokens, finish_reason=reason,
              cumulative_logprob=logprob, logprobs=positions)  # fmt: skip


def outputs(reply: Any) -> dict[str, list[Any]]:
    return {t.name: t.array.tolist() for t in reply.output_tensors}


def test_a_streamed_step_has_every_completion_those_without_news_empty() -> None:
    three = job(3, stream=True, logprobs=1)
    first = outputs(output_response(three, [NS(outputs=[piece(1, " b", 1)], finished=False)]))
    assert first["text_output"] == [b"", b" b", b""]
    assert first["num_output_tokens"] == [0, 1, 0]
    assert first["finish_reason"] == [b"None", b"None", b"None"]
    assert [json.loads(x) for x in first["logprobs"]] == [
        [],
        [{"5": {"logprob": -1.0, "rank": 1, "decoded_token": " b"}}],
        [],
    ]
    step = NS(outputs=[piece(2, " c", 2, "length", -2.0), piece(0, " a", 1)], finished=False)
    second = outputs(output_response(three, [step]))
    assert second["text_output"] == [b" a", b"", b" c"]
    assert second["num_output_tokens"] == [1, 0, 2]
    assert second["finish_reason"] == [b"None", b"None", b"length"]
    assert second["cumulative_logprob"] == [-1.0, -1.0, -2.0]  # the quiet one keeps its last


def test_a_whole_generation_has_each_completion_with_the_prompt_echoed() -> None:
    two = job(2, stream=False)
    two.parsed.exclude_input = False
    final = NS(outputs=[piece(0, " a b", 2, "stop"), piece(1, " c", 1, "length")], finished=True)
    made = outputs(output_response(two, [final]))
    assert made["text_output"] == [b"Hi a b", b"Hi c"]
    assert made["finish_reason"] == [b"stop", b"length"] and made["num_output_tokens"] == [2, 1]


def test_one_completion_is_sent_as_before() -> None:
    one = job(1, stream=True)
    made = outputs(output_response(one, [NS(outputs=[piece(0, " a", 1)], finished=False)]))
    assert made["text_output"] == [b" a"] and made["num_output_tokens"] == [1]


def test_logprobs_are_json_per_response_as_the_official_backend_writes_them() -> None:
    position = {
        7: NS(logprob=-0.25, rank=1, decoded_token=" a"),
        9: NS(logprob=-1.5, rank=2, decoded_token="b"),
    }
    piece = NS(logprobs=[position], cumulative_logprob=-0.25)
    returns = {"return_logprobs", "return_cumulative_logprob"}
    made = logprob_outputs(returns, [piece])
    assert json.loads(made["logprobs"][0][0]) == [
        {
            "7": {"logprob": -0.25, "rank": 1, "decoded_token": " a"},
            "9": {"logprob": -1.5, "rank": 2, "decoded_token": "b"},
        }
    ]
    assert made["cumulative_logprob"] == ([-0.25], np.float32)
    # Without sampling_parameters.logprobs vLLM keeps none: "null" and NaN, as there.
    unset = logprob_outputs(returns, [NS(logprobs=None, cumulative_logprob=None)])
    assert unset["logprobs"][0] == [b"null"]
    assert np.isnan(np.asarray(unset["cumulative_logprob"][0], dtype=np.float32)).all()
    assert logprob_outputs(set(), [piece]) == {}


def test_the_generated_token_comes_first_in_each_logprobs_position() -> None:
    position = {
        7: NS(logprob=-0.25, rank=1, decoded_token=" a"),
        9: NS(logprob=-1.5, rank=2, decoded_token="b"),
    }
    piece = NS(logprobs=[position, position], token_ids=[9, 7], cumulative_logprob=-1.75)
    made = logprob_outputs({"return_logprobs"}, [piece])
    assert [list(p) for p in json.loads(made["logprobs"][0][0])] == [["9", "7"], ["7", "9"]]


def test_merged_pieces_join_texts_tokens_and_logprobs_and_keep_the_last_reason() -> None:
    one = Quiet(None, -0.5, [{1: "x"}], "Hel", (1,))
    two = Quiet("stop", -0.75, [{2: "y"}, {3: "z"}], "lo", (2, 3))
    assert merged([one, two]) == Quiet("stop", -0.75, [{1: "x"}, {2: "y"}, {3: "z"}], "Hello", (1, 2, 3))
    assert merged([Quiet(text="a"), Quiet(text="b")]).logprobs is None
    assert merged([one]) is one
