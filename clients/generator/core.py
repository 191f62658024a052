"""The wire codec of Triton's vLLM-backend interface, without any I/O: a request's fields and
its gRPC message, a response (gRPC or JSON) as a `Piece`, a stream's error as a typed error, the
pieces joined into a `Generation`. `client` and `aio` only send and read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import InferResult, service_pb2

from ..errors import InvalidInput, InvalidResponse, TritonClientError, translate

Prompt = str | Sequence[Mapping[str, str]]
# Bad-input errors of the model name the request field first; a gRPC stream error carries no status.
# ``max_tokens=``: a max_tokens above max_model_len, refused in vLLM's OpenAI server's words.
FIELDS = ("text_input", "messages", "sampling_parameters", "priority", "exclude_input_in_output", "LoRA ",
          "max_tokens=")  # fmt: skip
# Inputs of the local model that Triton's vLLM backend lacks: checked against the model's metadata.
EXTENSIONS = ("messages", "priority")


@dataclass(frozen=True)
class Completion:
    """One of the ``n`` completions of a request (sampling parameter ``n``)."""

    text: str
    finish_reason: str | None
    num_output_tokens: int
    logprobs: str | None = None  # the model's ``logprobs`` output (JSON) when it was asked for


@dataclass(frozen=True)
class Generation:
    """The first completion's text, finish reason and output tokens; with ``n`` > 1 the others
    in ``others`` (``completions`` has them all, in index order)."""

    text: str
    finish_reason: str
    num_input_tokens: int
    num_output_tokens: int
    others: tuple[Completion, ...] = ()

    @property
    def completions(self) -> tuple[Completion, ...]:
        return (Completion(self.text, self.finish_reason, self.num_output_tokens), *self.others)


@dataclass(frozen=True)
class Piece:
    """One response of a stream: its text, and the counts the server sent with it (the first
    completion's; with ``n`` > 1 each other completion's piece in ``others``, in index order)."""

    text: str
    finish_reason: str | None
    num_input_tokens: int
    num_output_tokens: int
    others: tuple[Completion, ...] = ()
    logprobs: str | None = None  # the model's ``logprobs`` output (JSON: per new token, its candidates)


def request_fields(
    prompt: Prompt, stream: bool, max_tokens: int, temperature: float, top_p: float,
    stop: Sequence[str] | None, priority: int | None, extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The model's inputs for one request, as Python values keyed by input name (``priority``
    only when set: None leaves it to the model's default)."""
    sampling: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
    if stop:
        sampling["stop"] = list(stop)
    sampling.update(extra or {})
    fields: dict[str, Any] = {
        "stream": stream,
        "exclude_input_in_output": True,
        "sampling_parameters": json.dumps(sampling),
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    if priority is not None:
        fields["priority"] = priority
    if isinstance(prompt, str):
        fields["text_input"] = prompt
    else:
        fields["messages"] = json.dumps([dict(m) for m in prompt])
    return fields


def with_lora(sampling: Mapping[str, Any], lora_name: str | None) -> dict[str, Any]:
    """The extra sampling parameters, with ``lora_name`` when one is asked for."""
    return {**sampling, "lora_name": lora_name} if lora_name is not None else dict(sampling)


def model_inputs(metadata: Mapping[str, Any]) -> frozenset[str]:
    """The input names of a model's metadata (HTTP's JSON, or gRPC's response as a dict)."""
    return frozenset(str(t["name"]) for t in metadata.get("inputs", []))


def fit_to_model(fields: dict[str, Any], inputs: frozenset[str], model: str) -> dict[str, Any]:
    """``fields`` unchanged if the model has every input they use; else InvalidInput saying which."""
    if "messages" in fields and "messages" not in inputs:
        raise InvalidInput(
            f"model '{model}' has no messages input (as Triton's vLLM backend): send the prompt as "
            "text, already rendered with the model's chat template"
        )
    if "priority" in fields and "priority" not in inputs:
        raise InvalidInput(
            f"model '{model}' has no priority input (as Triton's vLLM backend): leave it unset"
        )
    return fields


def grpc_request(model: str, fields: Mapping[str, Any]) -> service_pb2.ModelInferRequest:
    """A ModelInferRequest carrying ``fields`` (str -> BYTES, bool -> BOOL, int -> INT32)."""
    request = service_pb2.ModelInferRequest(model_name=model)
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    for name, value in fields.items():
        tensor = request.inputs.add(name=name, shape=[1])
        if isinstance(value, bool):
            tensor.datatype = "BOOL"
            tensor.contents.bool_contents.append(value)
        elif isinstance(value, int):
            tensor.datatype = "INT32"
            tensor.contents.int_contents.append(value)
        else:
            tensor.datatype = "BYTES"
            tensor.contents.bytes_contents.append(str(value).encode("utf-8"))
    return request


def _scalar(array: np.ndarray[Any, Any] | list[Any] | None, default: Any) -> Any:
    values = _flat(array)
    if not values:
        return default
    value = values[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _flat(array: np.ndarray[Any, Any] | list[Any] | None) -> list[Any]:
    """An output's values in order (a list read from raw contents is one already)."""
    if array is None:
        return []
    return array if isinstance(array, list) else list(array.reshape(-1))


def ends_request(response: Any) -> bool:
    """Whether a ModelStreamInferResponse is its request's last: the final one, or an error that
    Triton marks final or could not issue (such an error has no ``triton_final_response``)."""
    params = response.infer_response.parameters
    if response.error_message:
        return "triton_final_response" not in params or bool(params["triton_final_response"].bool_param)
    return "triton_final_response" in params and bool(params["triton_final_response"].bool_param)


def piece_from_grpc(response: Any) -> tuple[Piece | None, bool]:
    """(the piece, whether it is the last) from a ModelStreamInferResponse; raises its error."""
    if response.error_message:
        raise stream_error(response.error_message)
    infer = response.infer_response
    final = infer.parameters["triton_final_response"].bool_param
    if not infer.outputs:  # the empty final response
        return None, final
    if len(infer.raw_output_contents) == len(infer.outputs):  # as tritonserver sends them
        raw = zip(infer.outputs, infer.raw_output_contents, strict=True)
        return _piece({o.name: _raw_values(o.datatype, data) for o, data in raw if o.name in _OUTPUTS}), final
    result = InferResult(infer)
    return _piece({name: result.as_numpy(name) for name in _OUTPUTS}), final


_RAW_TYPES = {"BOOL": "?", "UINT32": "<u4", "INT32": "<i4", "UINT64": "<u8", "INT64": "<i8", "FP32": "<f4"}


def _raw_values(datatype: str, data: bytes) -> list[Any]:
    """The values of one output's raw contents, read directly (one stream carries a response per
    token): BYTES as length-prefixed strings (4 bytes, little-endian), numbers by their type."""
    if datatype != "BYTES":
        return np.frombuffer(data, dtype=_RAW_TYPES[datatype]).tolist()  # type: ignore[no-any-return]
    values, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "little")
        values.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return values


def piece_from_json(body: Mapping[str, Any]) -> Piece:
    """A piece from one JSON response of ``generate`` / ``generate_stream``; raises its error."""
    if "error" in body:
        raise stream_error(str(body["error"]))
    if "text_output" not in body:
        raise InvalidResponse(f"response without text_output: {sorted(body)}")
    return _piece({name: np.asarray(body.get(name)) if name in body else None for name in _OUTPUTS})


_OUTPUTS = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens", "logprobs")


def _piece(values: Mapping[str, np.ndarray[Any, Any] | list[Any] | None]) -> Piece:
    texts = _each(values.get("text_output"), "")
    reasons = _each(values.get("finish_reason"), None, len(texts))
    tokens = _each(values.get("num_output_tokens"), 0, len(texts))
    logprobs = _each(values.get("logprobs"), None, len(texts))
    completions = [
        Completion(str(text), None if reason in (None, "None", "") else str(reason), int(count),
                   None if chosen is None else str(chosen))
        for text, reason, count, chosen in zip(texts, reasons, tokens, logprobs, strict=False)
    ]  # fmt: skip
    first, prompt = completions[0], int(_scalar(values.get("num_input_tokens"), 0))
    return Piece(
        first.text,
        first.finish_reason,
        prompt,
        first.num_output_tokens,
        tuple(completions[1:]),
        first.logprobs,
    )


def _each(array: np.ndarray[Any, Any] | list[Any] | None, default: Any, size: int = 1) -> list[Any]:
    """An output's values, one per completion (``size`` defaults when the output is missing)."""
    values = _flat(array)
    if not values:
        return [default] * size
    return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]


def stream_error(message: str, status: str = "") -> TritonClientError:
    """The typed error for a model's error message (streams carry no status code)."""
    error = translate(_Raw(message, status))
    if type(error) is TritonClientError and message.startswith(FIELDS):
        return InvalidInput(message)
    return error


class _Raw(Exception):
    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


def join(pieces: Sequence[Piece]) -> Generation:
    """The whole generation from its pieces (token counts per piece are deltas)."""
    if not pieces:
        raise InvalidResponse("the server sent no response")
    first = _join_completion([Completion(p.text, p.finish_reason, p.num_output_tokens) for p in pieces])
    n = max(len(p.others) for p in pieces)
    others = tuple(_join_completion([p.others[i] for p in pieces if len(p.others) > i]) for i in range(n))
    prompt_tokens = max(p.num_input_tokens for p in pieces)
    return Generation(first.text, first.finish_reason or "", prompt_tokens, first.num_output_tokens, others)


def _join_completion(pieces: Sequence[Completion]) -> Completion:
    reason = next((p.finish_reason for p in reversed(pieces) if p.finish_reason), "")
    return Completion("".join(p.text for p in pieces), reason, sum(p.num_output_tokens for p in pieces))


def sse_events(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of server-sent events (``data: {...}`` lines)."""
    for line in lines:
        text = line.decode("utf-8").strip()
        if text.startswith("data:"):
            yield json.loads(text[5:])


def http_url(address: str, model: str, stream: bool) -> str:
    return f"http://{address}/v2/models/{model}/generate" + ("_stream" if stream else "")


def http_status_error(status: int, data: bytes) -> TritonClientError:
    try:
        message = str(json.loads(data).get("error", data.decode("utf-8", "replace")))
    except (ValueError, AttributeError):
        message = data.decode("utf-8", "replace")
    return stream_error(message, str(status))
