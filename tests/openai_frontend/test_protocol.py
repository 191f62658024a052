"""OpenAI requests to the Triton model's inputs, and errors to OpenAI's shape (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clients.errors import (
    InvalidInput,
    ModelNotReady,
    RequestRejected,
    ServerUnavailable,
    TritonClientError,
)
from clients.generator import stream_error
from clients.vllm_engine_contract import TO_CONTEXT_END
from openai_frontend.protocol import (
    OpenAIError,
    from_triton,
    parse_chat,
    parse_completion,
    parse_json,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


def _refused(parse: Any, body: dict[str, Any]) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        parse(body)
    assert caught.value.status == 400
    return caught.value


def test_chat_maps_to_the_model_inputs() -> None:
    call = parse_chat({**CHAT, "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": "\n",
                       "stream": True, "stream_options": {"include_usage": True}, "user": "u"})  # fmt: skip
    fields = call.fields(with_priority=False)
    assert json.loads(fields["messages"]) == [{"role": "user", "content": "Hi"}]
    assert "text_input" not in fields and fields["stream"] is True and fields["exclude_input_in_output"]
    assert json.loads(fields["sampling_parameters"]) == {
        "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n"]
    }  # fmt: skip
    assert all(fields[f"return_{k}"] for k in ("finish_reason", "num_input_tokens", "num_output_tokens"))
    assert call.include_usage


def test_max_completion_tokens_wins_and_unset_leaves_the_model_default() -> None:
    call = parse_chat({**CHAT, "max_completion_tokens": 4, "max_tokens": 9})
    assert call.sampling == {"max_tokens": 4}
    assert parse_chat(CHAT).sampling == {}  # the model applies the spec's sampling defaults


def test_text_parts_are_joined_and_developer_is_system() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages = [{"role": "developer", "content": parts}]
    assert parse_chat({"model": "m", "messages": messages}).prompt == [{"role": "system", "content": "ab"}]


def test_vllm_extensions_pass_through() -> None:
    call = parse_completion({"model": "m", "prompt": "p", "ignore_eos": True, "top_k": 5, "other": 1})
    assert call.sampling == {"ignore_eos": True, "top_k": 5}


def test_completion_takes_one_prompt() -> None:
    call = parse_completion({"model": "m", "prompt": ["Once"], "stop": ["a", "b"]})
    assert call.prompt == "Once" and call.sampling == {"stop": ["a", "b"]} and not call.stream
    assert call.fields(with_priority=False)["text_input"] == "Once"
    assert _refused(parse_completion, {"model": "m", "prompt": [1, 2]}).param == "prompt"


def test_priority_is_sent_only_to_a_model_that_takes_it() -> None:
    call = parse_chat({**CHAT, "priority": -1})
    assert call.fields(with_priority=True)["priority"] == -1
    assert "priority" not in call.fields(with_priority=False)
    assert _refused(parse_chat, {**CHAT, "priority": "high"}).param == "priority"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": 5, "messages": CHAT["messages"]}, "model"),
        ({**CHAT, "max_tokens": "many"}, "max_tokens"),
        ({**CHAT, "temperature": "hot"}, "temperature"),
        ({**CHAT, "stream": "yes please"}, None),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": []}, "messages"),
        ({**CHAT, "top_logprobs": 2}, "top_logprobs"),
        ({**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({**CHAT, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ({**CHAT, "guided_json": {"type": "object"}}, "guided_json"),
        (
            {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
        ),
        ({**CHAT, "response_format": {"type": "grammar"}}, "response_format.type"),
        ({**CHAT, "structured_outputs": ["x"]}, "structured_outputs"),
        ({**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ],
)
def test_bad_chat_requests_name_their_field(body: dict[str, Any], param: str | None) -> None:
    error = _refused(parse_chat, body)
    assert error.param == param
    assert error.body()["error"]["type"] == "invalid_request_error"
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


def test_defaults_of_unsupported_fields_are_accepted() -> None:
    assert parse_chat({**CHAT, "n": 1, "logprobs": False, "tool_choice": "none"}).sampling == {}
    assert parse_completion({"model": "m", "prompt": "p", "echo": False, "best_of": 1, "logprobs": None})


def test_n_reaches_the_model_as_vllms_n() -> None:
    assert parse_chat({**CHAT, "n": 3}).sampling == {"n": 3}
    assert parse_completion({"model": "m", "prompt": "p", "n": 2}).sampling == {"n": 2}


def test_completion_logprobs_ask_the_model_for_its_logprobs_and_echo_is_taken() -> None:
    call = parse_completion({"model": "m", "prompt": "p", "logprobs": 2})
    assert call.top_logprobs == 2 and call.sampling == {"logprobs": 2}
    assert call.fields(with_priority=False)["return_logprobs"] is True
    assert parse_completion({"model": "m", "prompt": "p", "logprobs": 0}).top_logprobs == 0
    assert "return_logprobs" not in parse_completion({"model": "m", "prompt": "p"}).fields(
        with_priority=False
    )
    assert _refused(parse_completion, {"model": "m", "prompt": "p", "logprobs": 21}).param == "logprobs"
    with_echo = {"model": "m", "prompt": "p", "logprobs": 1, "echo": True}
    assert "prompt's logprobs" in _refused(parse_completion, with_echo).message
    assert parse_completion({"model": "m", "prompt": "p", "echo": True}).echo
    assert _refused(parse_chat, {**CHAT, "echo": True}).param == "echo"


def test_chat_logprobs_take_top_logprobs_as_vllms_logprobs() -> None:
    call = parse_chat({**CHAT, "logprobs": True, "top_logprobs": 2})
    assert call.top_logprobs == 2 and call.sampling == {"logprobs": 2}
    assert parse_chat({**CHAT, "logprobs": True}).top_logprobs == 0  # the chosen token's alone
    assert parse_chat({**CHAT, "logprobs": True, "top_logprobs": 20}).top_logprobs == 20
    assert parse_chat({**CHAT, "logprobs": False}).top_logprobs is None


def test_without_max_tokens_the_answer_may_run_to_the_context_end() -> None:
    """As vLLM's server: the model caps max_tokens at max_model_len minus the prompt."""
    call = parse_chat(CHAT)
    sampling = json.loads(call.fields(with_priority=False, to_context_end=True)["sampling_parameters"])
    assert sampling == {"max_tokens": TO_CONTEXT_END}
    assert json.loads(call.fields(with_priority=False)["sampling_parameters"]) == {}  # the model's default
    limited = parse_chat({**CHAT, "max_tokens": 5}).fields(with_priority=False, to_context_end=True)
    assert json.loads(limited["sampling_parameters"]) == {"max_tokens": 5}


@pytest.mark.parametrize("body", [b"{", b"[1]", b"\xff"])
def test_a_body_that_is_no_json_object_is_400(body: bytes) -> None:
    with pytest.raises(OpenAIError) as caught:
        parse_json(body)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (stream_error("sampling_parameters.n: only 1 is supported, got 2"), 400, "invalid_request_error"),
        (
            stream_error(
                "max_tokens=600 cannot be greater than max_model_len=512. Please request fewer output "
                "tokens. (parameter=max_tokens, value=600)"
            ),
            400,
            "invalid_request_error",
        ),
        (stream_error("engine is full: 32 requests in flight"), 429, "rate_limit_error"),
        (stream_error("Exceeds maximum queue size"), 429, "rate_limit_error"),
        (InvalidInput("unexpected inference input 'x'"), 400, "invalid_request_error"),
        (ModelNotReady("model is not ready"), 503, "server_error"),
        (ServerUnavailable("failed to connect"), 503, "server_error"),
        (TritonClientError("Engine failed"), 500, "server_error"),
    ],
)
def test_triton_errors_map_to_openai_statuses(error: TritonClientError, status: int, kind: str) -> None:
    mapped = from_triton(error)
    assert (mapped.status, mapped.kind) == (status, kind)
    assert mapped.body()["error"]["message"] == str(error)
    assert isinstance(error, RequestRejected) == (status == 429)


def test_model_may_be_left_out() -> None:
    """vLLM's server then uses the one model it serves; the endpoint resolves it the same way."""
    assert parse_chat({"messages": CHAT["messages"]}).model is None
    assert parse_completion({"prompt": "p", "model": None}).model is None


def test_stream_options_without_stream_is_400() -> None:
    for parse, body in ((parse_chat, CHAT), (parse_completion, {"model": "m", "prompt": "p"})):
        error = _refused(parse, {**body, "stream_options": {"include_usage": True}})
        assert error.param == "stream_options" and "can only be used when `stream` is True" in error.message
    assert parse_chat({**CHAT, "stream": True, "stream_options": {"include_usage": False}}).stream


def test_top_logprobs_without_logprobs_names_the_rule() -> None:
    error = _refused(parse_chat, {**CHAT, "top_logprobs": 2})
    assert "`top_logprobs` can only be used when `logprobs` is True" in error.message
    assert "from 0 to 20" in _refused(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": 21}).message


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("fmt", "made"),
    [
        ({"type": "json_object"}, {"json_object": True}),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}, {"json": SCHEMA}),
    ],
)
def test_a_json_response_format_becomes_vllms_structured_outputs(fmt: dict[str, Any], made: Any) -> None:
    """As vLLM's server maps it; the model makes vLLM's StructuredOutputsParams of it."""
    assert parse_chat({**CHAT, "response_format": fmt}).sampling == {"structured_outputs": json.dumps(made)}
    body = {"model": "m", "prompt": "p", "response_format": fmt}  # vLLM's completions extension
    assert parse_completion(body).sampling == {"structured_outputs": json.dumps(made)}
    assert parse_chat({**CHAT, "response_format": {"type": "text"}}).sampling == {}


def test_vllms_structured_outputs_field_goes_to_the_model_and_response_format_overrides_it() -> None:
    own = {"choice": ["yes", "no"]}
    assert parse_completion({"model": "m", "prompt": "p", "structured_outputs": own}).sampling == {
        "structured_outputs": json.dumps(own)
    }
    both = {
        **CHAT,
        "structured_outputs": {"disable_any_whitespace": True},
        "response_format": {"type": "json_object"},
    }
    assert json.loads(parse_chat(both).sampling["structured_outputs"]) == {
        "disable_any_whitespace": True,
        "json_object": True,
    }


def test_vllms_former_guided_fields_are_refused() -> None:
    error = _refused(parse_completion, {"model": "m", "prompt": "p", "guided_json": {"type": "object"}})
    assert error.param == "guided_json" and "structured_outputs" in error.message


def test_logit_bias_goes_to_the_model() -> None:
    """The model turns the keys into token ids and clamps the biases, as vLLM's server does."""
    assert parse_chat({**CHAT, "logit_bias": {"50256": -100}}).sampling == {"logit_bias": {"50256": -100}}


def test_a_list_of_prompts_is_one_generation_each() -> None:
    call = parse_completion({"model": "m", "prompt": ["a", "b"], "n": 2, "echo": True})
    assert call.prompts == ("a", "b") and call.n == 2 and call.echo
    assert [call.fields(False, index=i)["text_input"] for i in (0, 1)] == ["a", "b"]
    for prompt in ([], [[1, 2]], [1, 2], ["a", 3]):
        assert _refused(parse_completion, {"model": "m", "prompt": prompt}).param == "prompt"


def test_tool_choice_none_answers_without_the_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert parse_chat({**CHAT, "tools": tools, "tool_choice": "none"}).prompt == CHAT["messages"]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "f"}}):
        error = _refused(parse_chat, {**CHAT, "tools": tools, "tool_choice": choice})
        assert error.param == "tool_choice" and "tool-call parser" in error.message
    assert "`tools` must be set" in _refused(parse_chat, {**CHAT, "tool_choice": "auto"}).message
    assert _refused(parse_chat, {**CHAT, "tools": []}).param == "tools"
