"""Request parsing of the vllm_engine Python model (utils/requests.py: its helpers import without
Triton or vLLM), and the ``stream_min_gap_ms`` parameter it reads."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils.requests import (
    DEFAULT_MAX_TOKENS,
    SAMPLING_FIELDS,
    STRUCTURED_FIELDS,
)
from clients.vllm_engine_contract import TO_CONTEXT_END
from tests.builder.llm.needs import NEEDS_VLLM

KNOWN = {"max_tokens", "temperature", "top_p", "top_k", "stop", "ignore_eos", "seed", "n", "output_kind"}


def getter(**inputs: Any) -> Any:
    arrays = {
        k: np.array([v], dtype=object if isinstance(v, (str, bytes)) else None) for k, v in inputs.items()
    }
    return arrays.get


def test_a_vllm_backend_request_parses_with_its_defaults() -> None:
    parsed = m.parse_request(
        getter(text_input=b"Hello", sampling_parameters=b'{"temperature": "0.5"}'), "", KNOWN
    )
    assert parsed.prompt == "Hello" and parsed.messages is None
    assert not parsed.stream and not parsed.exclude_input  # non-streamed: the prompt is echoed, as there
    assert parsed.sampling == {"temperature": 0.5} and parsed.priority == 0 and parsed.returns == set()


def test_streaming_excludes_the_prompt_and_flags_select_outputs() -> None:
    get = getter(
        text_input="Hi", stream=True, return_finish_reason=True, return_num_output_tokens=True, priority=3
    )
    parsed = m.parse_request(get, "", KNOWN)
    assert parsed.stream and parsed.exclude_input and parsed.priority == 3
    assert parsed.returns == {"return_finish_reason", "return_num_output_tokens"}


def test_request_parameters_stand_in_for_sampling_parameters() -> None:
    parsed = m.parse_request(getter(text_input="Hi"), json.dumps({"max_tokens": "5", "priority": 2}), KNOWN)
    assert parsed.sampling == {"max_tokens": 5} and parsed.priority == 2


def test_messages_replace_text_input() -> None:
    chat = json.dumps([{"role": "user", "content": "Hi"}])
    parsed = m.parse_request(getter(messages=chat), "", KNOWN)
    assert parsed.prompt is None and parsed.messages == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({}, "text_input is required"),
        ({"text_input": "   "}, "text_input is empty"),
        ({"text_input": b"\xff\xfe"}, r"text_input is not valid UTF-8 \(invalid start byte at byte 0\)"),
        ({"text_input": "x", "sampling_parameters": "{"}, "sampling_parameters is not valid JSON"),
        (
            {"text_input": "x", "sampling_parameters": "3"},
            "sampling_parameters must be a JSON object, got int",
        ),
        ({"text_input": "x", "sampling_parameters": '{"foo": 1, "bar": 2}'}, r"unknown key\(s\) bar, foo"),
        ({"text_input": "x", "sampling_parameters": '{"output_kind": 1}'}, r"unknown key\(s\) output_kind"),
        (
            {"text_input": "x", "sampling_parameters": '{"temperature": -1}'},
            "temperature must be >= 0, got -1",
        ),
        (
            {"text_input": "x", "sampling_parameters": '{"temperature": "hot"}'},
            "temperature must be a number",
        ),
        (
            {"text_input": "x", "sampling_parameters": '{"max_tokens": 0}'},
            "max_tokens must be at least 1, got 0",
        ),
        ({"text_input": "x", "sampling_parameters": '{"max_tokens": 2.5}'}, "max_tokens must be a number"),
        ({"text_input": "x", "sampling_parameters": '{"n": 0}'}, "n must be at least 1, got 0"),
        (
            {"text_input": "x", "stream": True, "exclude_input_in_output": False},
            "exclude_input_in_output must be",
        ),
        ({"messages": "[]"}, "messages must be a non-empty JSON list"),
        ({"messages": '[{"content": "a"}]'}, "needs a string 'role'"),
        ({"text_input": "x", "priority": "high"}, "priority must be an integer"),
    ],
)
def test_bad_requests_name_the_field(inputs: dict[str, Any], message: str) -> None:
    with pytest.raises(m.BadRequest, match=message):
        m.parse_request(getter(**inputs), "", KNOWN)


def test_length_limits_name_the_limit_and_the_count() -> None:
    assert m.check_length(10, {}, 512) == 16
    assert m.check_length(500, {}, 512) == 12  # the default shrinks to the room left
    assert m.check_length(10, {"max_tokens": 502}, 512) == 502
    with pytest.raises(m.BadRequest, match="text_input is 600 tokens, the model's max_model_len is 512"):
        m.check_length(600, {}, 512)
    # As vLLM's OpenAI server: beside the prompt beyond the context, it runs to the context's end
    # and stops with "length"; above max_model_len itself, refused in that server's words.
    assert m.check_length(10, {"max_tokens": 512}, 512) == 502
    assert m.check_length(500, {"max_tokens": 64}, 512) == 12
    with pytest.raises(m.BadRequest, match=r"^max_tokens=513 cannot be greater than max_model_len=512\. "):
        m.check_length(10, {"max_tokens": 513}, 512)
    assert m.check_length(10, {"max_tokens": TO_CONTEXT_END}, 512) == 502
    with pytest.raises(m.BadRequest, match="text_input is 512 tokens"):
        m.check_length(512, {}, 512)


def test_a_null_max_tokens_means_the_default() -> None:
    get = getter(text_input="x", sampling_parameters='{"max_tokens": null, "temperature": null}')
    parsed = m.parse_request(get, "", KNOWN)
    assert parsed.sampling == {}
    assert m.check_length(10, parsed.sampling, 512) == DEFAULT_MAX_TOKENS


@NEEDS_VLLM
@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"top_p": 0.0}, r"^sampling_parameters\.top_p: top_p must be in \(0, 1\], got 0"),
        ({"temperature": 3.0}, r"^sampling_parameters\.temperature: temperature must be in \[0, 2\], got 3"),
        ({"stop": [""]}, r"^sampling_parameters: stop cannot contain an empty string"),
        ({"top_k": -5}, r"^sampling_parameters: top_k must be 0 \(disable\), or at least 1"),
    ],
)
def test_what_vllm_refuses_is_a_bad_request_naming_the_field(sampling: dict[str, Any], message: str) -> None:
    with pytest.raises(m.BadRequest, match=message):
        m.sampling_params(dict(sampling, max_tokens=4))


@NEEDS_VLLM
def test_vllm_client_errors_raised_later_become_bad_requests() -> None:
    from vllm.exceptions import VLLMValidationError

    refused = VLLMValidationError("logprobs 30 is above the limit 20", parameter="logprobs", value=30)
    assert m.refusal(refused) == "sampling_parameters.logprobs: logprobs 30 is above the limit 20"
    assert m.refusal(RuntimeError("engine core died")) is None


PRIVATE = ["_all_stop_token_ids", "output_text_buffer_length", "skip_clone", "detokenize"]


@NEEDS_VLLM
@pytest.mark.parametrize("key", PRIVATE)
def test_only_public_sampling_fields_are_accepted(key: str) -> None:
    from vllm.sampling_params import SamplingParams

    known = m.sampling_keys(SamplingParams.__struct_fields__)
    assert {"temperature", "top_p", "max_tokens", "stop", "seed", "structured_outputs"} <= known
    with pytest.raises(m.BadRequest, match=rf"unknown key\(s\) {key} "):
        m.parse_request(getter(text_input="x", sampling_parameters=json.dumps({key: 1})), "", known)


@NEEDS_VLLM
def test_the_allowed_sampling_fields_all_exist_in_vllm() -> None:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    assert not SAMPLING_FIELDS - set(SamplingParams.__struct_fields__)
    assert not set(STRUCTURED_FIELDS) - set(StructuredOutputsParams.__dataclass_fields__)


@NEEDS_VLLM
@pytest.mark.parametrize("as_sent", [{"choice": ["yes", "no"]}, '{"choice": ["yes", "no"]}'])
def test_structured_outputs_become_vllms_params(as_sent: Any) -> None:
    from vllm.sampling_params import StructuredOutputsParams

    text = json.dumps({"structured_outputs": as_sent, "max_tokens": 4})  # an object, or JSON in a string
    parsed = m.parse_request(
        getter(text_input="x", sampling_parameters=text), "", {"structured_outputs"} | KNOWN
    )
    params = m.sampling_params(parsed.sampling)
    assert isinstance(params.structured_outputs, StructuredOutputsParams)
    assert params.structured_outputs.choice == ["yes", "no"]


@NEEDS_VLLM
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"choice": ["a"], "regex": "a+"}, "structured_outputs: You can only use one kind of structured"),
        ({"_backend": "xgrammar"}, r"structured_outputs: unknown key\(s\) _backend"),
        ([1], "structured_outputs must be a JSON object"),
        ("{", "structured_outputs is not valid JSON"),
    ],
)
def test_bad_structured_outputs_name_the_field(value: Any, message: str) -> None:
    with pytest.raises(m.BadRequest, match=rf"^sampling_parameters\.{message}"):
        m.sampling_params({"structured_outputs": value, "max_tokens": 4})


def test_the_official_backends_logprob_flags_are_accepted_and_select_outputs() -> None:
    # As Triton's additional_outputs_test.py sends them: both flags, false or true.
    off = m.parse_request(
        getter(text_input="Hi", return_logprobs=False, return_cumulative_logprob=False), "", KNOWN
    )
    assert off.returns == set()
    on = m.parse_request(
        getter(text_input="Hi", return_logprobs=True, return_cumulative_logprob=True), "", KNOWN
    )
    assert on.returns == {"return_logprobs", "return_cumulative_logprob"}


def test_logit_bias_keys_become_token_ids_and_biases_are_clamped_as_vllm_does() -> None:
    from builder.python_models.vllm_engine.utils.requests import logit_bias

    assert logit_bias({"50": 5, "7": -250, "9": 300.5}) == {50: 5.0, 7: -100.0, 9: 100.0}
    with pytest.raises(m.BadRequest, match=r"^sampling_parameters\.logit_bias: key 'the' is not an integer"):
        logit_bias({"the": 1})
    with pytest.raises(m.BadRequest, match=r"^sampling_parameters\.logit_bias\[5\] must be a number"):
        logit_bias({"5": "high"})
    with pytest.raises(m.BadRequest, match="must be a JSON object"):
        logit_bias([5])


@NEEDS_VLLM
def test_logit_bias_reaches_vllm_with_integer_token_ids() -> None:
    text = json.dumps({"logit_bias": {"42": 150}, "max_tokens": 4})
    parsed = m.parse_request(getter(text_input="x", sampling_parameters=text), "", {"logit_bias"} | KNOWN)
    assert m.sampling_params(parsed.sampling).logit_bias == {42: 100.0}
    with pytest.raises(m.BadRequest, match="logit_bias: key '4x' is not an integer"):
        m.sampling_params({"logit_bias": {"4x": 1}, "max_tokens": 4})


@NEEDS_VLLM
@pytest.mark.parametrize("value", [{"json": {"type": "object"}}, {"json_object": True}])
def test_the_openai_endpoints_json_formats_become_vllms_structured_outputs(value: dict[str, Any]) -> None:
    params = m.sampling_params({"structured_outputs": value, "max_tokens": 4})
    assert params.structured_outputs.json == value.get("json")
    assert params.structured_outputs.json_object == value.get("json_object")


@pytest.mark.parametrize("text", ["-1", "1001", "x", "nan"])
def test_a_bad_min_gap_parameter_names_it(text: str) -> None:
    with pytest.raises(ValueError, match="parameter stream_min_gap_ms: want milliseconds from 0 to 1000"):
        m.parse_min_gap(text)


def test_min_gap_parameter_is_read_in_seconds() -> None:
    assert m.parse_min_gap("0") == 0 and m.parse_min_gap("40") == pytest.approx(0.04)
