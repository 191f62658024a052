"""OpenAI requests to the Triton model's inputs, and errors to OpenAI's error shape.

Requests are validated with the ``openai`` package's own request types (pydantic validates its
TypedDicts); what the model cannot do (tool calls, ``best_of``, ``suffix``...) is refused with a 400
naming the field, never silently ignored. ``response_format`` and vLLM's ``structured_outputs``
become the model's ``structured_outputs`` (vLLM's structured outputs, as vLLM's server makes them),
``logprobs`` the model's ``logprobs`` output, and ``logit_bias`` goes to the model, which applies it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params
from pydantic import TypeAdapter, ValidationError

from clients.errors import (
    InferenceTimeout,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    RequestRejected,
    ServerUnavailable,
    TritonClientError,
)
from clients.vllm_engine_contract import TO_CONTEXT_END

from .logprobs import MAX_TOP

_CHAT = TypeAdapter(chat_params.CompletionCreateParamsBase)
_COMPLETION = TypeAdapter(completion_params.CompletionCreateParamsBase)
_STREAM_OPTIONS = TypeAdapter(bool | None)
# Sampling fields passed to vLLM as they are (their names are vLLM's too).
SAMPLING = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
# vLLM's own extensions to the OpenAI request (its server takes them too); the model checks them.
EXTENSIONS = ("top_k", "min_p", "min_tokens", "ignore_eos", "repetition_penalty")
# Fields whose effect this endpoint does not provide: refused unless at their default.
UNSUPPORTED: Mapping[str, tuple[Any, ...]] = {
    "best_of": (None, 1),
    "suffix": (None, ""),
    "functions": (None,),
    "function_call": (None, "none"),
    "audio": (None,),
    "prediction": (None,),
    # vLLM's former structured-output fields (vLLM 0.32 has only ``structured_outputs``).
    **{name: (None,) for name in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")},
}  # fmt: skip
# Why, where it is not just "not supported by this endpoint".
REASONS: Mapping[str, str] = {
    **{name: "vLLM's server no longer takes it either: send `structured_outputs` or `response_format`"
       for name in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")},
}  # fmt: skip
ROLES = ("system", "developer", "user", "assistant", "tool")


class OpenAIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""

    def __init__(
        self, status: int, message: str, *, kind: str = "invalid_request_error",
        param: str | None = None, code: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="invalid_value" if param else None)


def unknown_model(name: str) -> OpenAIError:
    return OpenAIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


@dataclass(frozen=True)
class Call:
    """One OpenAI request as the Triton model takes it."""

    model: str | None  # None: the one LLM served
    prompts: tuple[str, ...] | tuple[list[dict[str, str]]]  # text_input each, or the chat as ``messages``
    stream: bool
    include_usage: bool
    sampling: dict[str, Any] = field(default_factory=dict)
    priority: int | None = None  # vLLM's extension field; lower runs first
    echo: bool = False  # completions: each choice's text starts with its prompt
    top_logprobs: int | None = None  # the candidates to return per token; None: no logprobs

    @property
    def prompt(self) -> str | list[dict[str, str]]:
        return self.prompts[0]

    @property
    def n(self) -> int:
        return int(self.sampling.get("n", 1))

    def fields(
        self, with_priority: bool, lora_name: str | None = None, index: int = 0, to_context_end: bool = False
    ) -> dict[str, Any]:
        """The model's inputs for prompt ``index`` (the names of Triton's vLLM-backend interface);
        ``lora_name`` goes in ``sampling_parameters``, where that backend reads it;
        ``to_context_end``: without max_tokens the answer may run to the context's end."""
        prompt = self.prompts[index]
        sampling = self.sampling if lora_name is None else {**self.sampling, "lora_name": lora_name}
        # A request that names no max_tokens, to a model without a default, may run to the context's
        # end, as vLLM's server allows (the model's own default, for Triton's clients, is vLLM's 16).
        if to_context_end and "max_tokens" not in sampling:
            sampling = {**sampling, "max_tokens": TO_CONTEXT_END}
        fields: dict[str, Any] = {
            "stream": self.stream,
            "exclude_input_in_output": True,
            "sampling_parameters": json.dumps(sampling),
            "return_finish_reason": True,
            "return_num_input_tokens": True,
            "return_num_output_tokens": True,
        }
        if self.top_logprobs is not None:
            fields["return_logprobs"] = True
        if isinstance(prompt, str):
            fields["text_input"] = prompt
        else:
            fields["messages"] = json.dumps(prompt)
        if with_priority and self.priority is not None:
            fields["priority"] = self.priority
        return fields


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise bad_request("the request body must be a JSON object")
    return value


def parse_chat(body: Mapping[str, Any]) -> Call:
    _check_roles(body.get("messages"))
    request = _validate(_CHAT, body)
    _check_tools(body)
    if body.get("echo"):  # vLLM's chat extension (echo the last message): not provided
        raise bad_request("echo: True is not supported on chat completions by this endpoint", "echo")
    try:
        messages = [_message(m) for m in request["messages"]]
    except ValidationError as exc:
        raise _from_validation(exc, prefix="messages") from None
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    limit = request.get("max_completion_tokens")
    if limit is None:
        limit = request.get("max_tokens")
    call = _call(body, request, (messages,), limit)
    top = request.get("top_logprobs")
    return _with_logprobs(call, _top(top or 0, "top_logprobs")) if request.get("logprobs") else call


def parse_completion(body: Mapping[str, Any]) -> Call:
    request = _validate(_COMPLETION, body)
    prompt = request["prompt"]
    prompts = (prompt,) if isinstance(prompt, str) else tuple(prompt) if isinstance(prompt, list) else ()
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise bad_request("prompt must be a string or a non-empty list of strings (token-id prompts are not "
                          "supported)", "prompt")  # fmt: skip
    call = replace(_call(body, request, prompts, request.get("max_tokens")), echo=bool(request.get("echo")))
    top = request.get("logprobs")
    if top is None:
        return call
    if isinstance(top, bool):
        raise bad_request(f"logprobs must be an integer on completions (the candidates per token), got {top}",
                          "logprobs")  # fmt: skip
    if call.echo:  # vLLM would add the prompt's own logprobs, which the model does not return
        raise bad_request("logprobs with echo is not supported (the prompt's logprobs are not returned)",
                          "logprobs")  # fmt: skip
    return _with_logprobs(call, _top(top, "logprobs"))


def _with_logprobs(call: Call, top: int) -> Call:
    """The model returns each token's logprob and ``top`` candidates (vLLM's ``logprobs``)."""
    return replace(call, top_logprobs=top, sampling={**call.sampling, "logprobs": top})


def _top(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP:
        raise bad_request(f"{name} must be an integer from 0 to {MAX_TOP}, got {value!r}", name)
    return value


def _validate(adapter: TypeAdapter[Any], body: Mapping[str, Any]) -> dict[str, Any]:
    # ``model`` may be left out (vLLM then uses the one model it serves); the SDK types require it.
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request(f"model must be a string, got {model!r}", "model")
    probe = body if model is not None else {**body, "model": ""}
    try:
        request = dict(adapter.validate_python(probe))
        request["stream"] = _STREAM_OPTIONS.validate_python(body.get("stream"))
    except ValidationError as exc:
        raise _from_validation(exc) from None
    if body.get("stream_options") and not request["stream"]:  # as vLLM; the words are Triton's frontend's
        raise bad_request("`stream_options` can only be used when `stream` is True", "stream_options")
    top = body.get("top_logprobs")
    if isinstance(top, int) and top != 0 and not body.get("logprobs"):
        raise bad_request("`top_logprobs` can only be used when `logprobs` is True", "top_logprobs")
    if isinstance(top, int) and not isinstance(top, bool) and not 0 <= top <= MAX_TOP:
        raise bad_request(f"top_logprobs must be an integer from 0 to {MAX_TOP}, got {top}", "top_logprobs")
    for name, defaults in UNSUPPORTED.items():
        if name in body and not _is_default(body[name], defaults):
            reason = REASONS.get(name, "not supported by this endpoint")
            raise bad_request(f"{name}: {body[name]!r} is not supported ({reason})", name)
    return request


def _is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    """Equal to a default of the same type (``logprobs: 0`` asks for something; False does not)."""
    return any(type(value) is type(d) and value == d for d in defaults)


def structured_outputs(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """vLLM's ``structured_outputs`` for the request, as vLLM's server makes them: the request's own
    (vLLM's extension field), with ``response_format`` over it (``json_object``: any JSON object;
    ``json_schema``: its ``schema``); None for neither (or ``text``). The model checks the keys."""
    made = body.get("structured_outputs")
    if made is not None and not isinstance(made, Mapping):
        raise bad_request(
            f"structured_outputs must be an object, got {type(made).__name__}", "structured_outputs"
        )
    made = dict(made) if made is not None else None
    value = body.get("response_format")
    if value is None:
        return made
    kind = value.get("type") if isinstance(value, Mapping) else value
    if kind == "text":
        return made
    if kind == "json_object":
        return {**(made or {}), "json_object": True}
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise bad_request("response_format: a json_schema format needs `json_schema.schema`, a JSON "
                              "schema object", "response_format")  # fmt: skip
        return {**(made or {}), "json": dict(schema)}
    raise bad_request(f"response_format: type {kind!r} is not supported; only 'text', 'json_object' and "
                      "'json_schema'", "response_format")  # fmt: skip


def _check_tools(body: Mapping[str, Any]) -> None:
    """vLLM's rules for ``tools``/``tool_choice``, without a tool-call parser: ``none`` answers
    without the tools; ``auto`` (the default with tools), ``required`` or a named tool is a 400."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools == []:
        raise bad_request("`tools` must not be an empty array. Either provide at least one tool or omit the "
                          "field entirely.", "tools")  # fmt: skip
    if choice is None and tools:
        choice = "auto"
    if choice in (None, "none"):
        return
    if not tools:
        raise bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice")
    shown = choice if isinstance(choice, str) else "a named tool"
    message = f"tool_choice {shown!r} needs a tool-call parser, and this endpoint has none: only"
    raise bad_request(f"{message} tool_choice 'none' (answered without the tools) is taken", "tool_choice")


def _call(body: Mapping[str, Any], request: Mapping[str, Any], prompts: Any, limit: int | None) -> Call:
    sampling = {k: request[k] for k in SAMPLING if request.get(k) is not None}
    sampling.update({k: body[k] for k in EXTENSIONS if body.get(k) is not None})
    if request.get("logit_bias"):
        sampling["logit_bias"] = dict(request["logit_bias"])
    structured = structured_outputs(body)
    if structured is not None:
        # As JSON text: Triton's vLLM backend (the gpu target) takes it only so; the local model both ways.
        sampling["structured_outputs"] = json.dumps(structured)
    if limit is not None:
        sampling["max_tokens"] = limit
    if request.get("n") not in (None, 1):  # completions: one choice each
        sampling["n"] = request["n"]
    stop = request.get("stop")
    if stop:
        sampling["stop"] = [stop] if isinstance(stop, str) else list(stop)
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise bad_request(f"priority must be an integer, got {priority!r}", "priority")
    options = request.get("stream_options") or {}
    return Call(
        model=str(request["model"]) or None,
        prompts=prompts,
        stream=bool(request["stream"]),
        include_usage=bool(options.get("include_usage")),
        sampling=sampling,
        priority=priority,
    )


def _check_roles(messages: Any) -> None:
    """A clear error for an unknown role (the union of message types would list every variant)."""
    if not isinstance(messages, list):
        return
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") not in ROLES:
            raise bad_request(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {m.get('role')!r}",
                              f"messages[{i}].role")  # fmt: skip


def _message(message: Mapping[str, Any]) -> dict[str, str]:
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        parts = list(content)
        if any(p.get("type") != "text" for p in parts):
            raise bad_request("message content parts other than text are not supported", "messages")
        content = "".join(str(p["text"]) for p in parts)
    role = str(message["role"])
    return {"role": "system" if role == "developer" else role, "content": content}


def _from_validation(exc: ValidationError, prefix: str = "") -> OpenAIError:
    error = exc.errors()[0]
    # Union members appear in the location by class name; the field path is what a user wrote.
    path = [str(p) for p in error["loc"] if not (isinstance(p, str) and p[:1].isupper())]
    param = ".".join([prefix, *path] if prefix else path) or None
    return bad_request(f"{param}: {error['msg']}" if param else str(error["msg"]), param)


def from_triton(exc: TritonClientError) -> OpenAIError:
    """The OpenAI error for a Triton model's or server's error."""
    message = str(exc)
    if isinstance(exc, InvalidInput):
        return bad_request(message)
    if isinstance(exc, RequestRejected):
        return OpenAIError(429, message, kind="rate_limit_error", code="rate_limit_exceeded")
    if isinstance(exc, ModelNotFound):
        return OpenAIError(404, message, code="model_not_found")
    if isinstance(exc, (ModelNotReady, ServerUnavailable)):
        return OpenAIError(503, message, kind="server_error", code="service_unavailable")
    if isinstance(exc, InferenceTimeout):
        return OpenAIError(504, message, kind="server_error", code="timeout")
    return OpenAIError(500, message, kind="server_error")
