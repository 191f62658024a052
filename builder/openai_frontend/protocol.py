"""OpenAI requests to the Triton model's inputs, and errors to OpenAI's error shape.

Requests are validated with the ``openai`` package's own request types (pydantic validates its
TypedDicts); what the model cannot do yet (log-probabilities, tools, ``echo``...) is
refused with a 400 naming the field, never silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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

_CHAT = TypeAdapter(chat_params.CompletionCreateParamsBase)
_COMPLETION = TypeAdapter(completion_params.CompletionCreateParamsBase)
_STREAM_OPTIONS = TypeAdapter(bool | None)
# Sampling fields passed to vLLM as they are (their names are vLLM's too).
SAMPLING = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
# vLLM's own extensions to the OpenAI request (its server takes them too); the model checks them.
EXTENSIONS = ("top_k", "min_p", "min_tokens", "ignore_eos", "repetition_penalty")
# Fields whose effect this endpoint does not provide: refused unless at their default.
UNSUPPORTED: Mapping[str, tuple[Any, ...]] = {
    "logprobs": (None, False),
    "top_logprobs": (None,),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "logit_bias": (None,),
    "tools": (None,),
    "tool_choice": (None, "none"),
    "functions": (None,),
    "function_call": (None, "none"),
    "audio": (None,),
    "prediction": (None,),
}
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

    model: str
    prompt: str | list[dict[str, str]]  # text_input, or the chat as ``messages``
    stream: bool
    include_usage: bool
    sampling: dict[str, Any] = field(default_factory=dict)
    priority: int | None = None  # vLLM's extension field; lower runs first

    def fields(self, with_priority: bool, lora_name: str | None = None) -> dict[str, Any]:
        """The model's inputs (the names of Triton's vLLM-backend interface); ``lora_name`` goes in
        ``sampling_parameters``, where that backend reads it."""
        sampling = self.sampling if lora_name is None else {**self.sampling, "lora_name": lora_name}
        fields: dict[str, Any] = {
            "stream": self.stream,
            "exclude_input_in_output": True,
            "sampling_parameters": json.dumps(sampling),
            "return_finish_reason": True,
            "return_num_input_tokens": True,
            "return_num_output_tokens": True,
        }
        if isinstance(self.prompt, str):
            fields["text_input"] = self.prompt
        else:
            fields["messages"] = json.dumps(self.prompt)
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
    try:
        messages = [_message(m) for m in request["messages"]]
    except ValidationError as exc:
        raise _from_validation(exc, prefix="messages") from None
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    limit = request.get("max_completion_tokens")
    if limit is None:
        limit = request.get("max_tokens")
    return _call(body, request, messages, limit)


def parse_completion(body: Mapping[str, Any]) -> Call:
    request = _validate(_COMPLETION, body)
    prompt = request["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request("prompt must be one string (token ids and batches of prompts are not supported)",
                          "prompt")  # fmt: skip
    return _call(body, request, prompt, request.get("max_tokens"))


def _validate(adapter: TypeAdapter[Any], body: Mapping[str, Any]) -> dict[str, Any]:
    try:
        request = dict(adapter.validate_python(body))
        request["stream"] = _STREAM_OPTIONS.validate_python(body.get("stream"))
    except ValidationError as exc:
        raise _from_validation(exc) from None
    for name, defaults in UNSUPPORTED.items():
        if name in body and request.get(name) not in defaults:
            raise bad_request(f"{name}: {body[name]!r} is not supported by this endpoint", name)
    return request


def _call(body: Mapping[str, Any], request: Mapping[str, Any], prompt: Any, limit: int | None) -> Call:
    sampling = {k: request[k] for k in SAMPLING if request.get(k) is not None}
    sampling.update({k: body[k] for k in EXTENSIONS if body.get(k) is not None})
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
        model=str(request["model"]),
        prompt=prompt,
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
