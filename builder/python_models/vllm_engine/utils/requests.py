"""Request parsing: a request's inputs and parameters checked, and vLLM's sampling parameters made
from them. Imports without Triton or vLLM (vLLM's names are imported where called), so tests call
these directly."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..contract import (
    EXCLUDE_INPUT_IN_OUTPUT,
    LORA_KEY,
    MESSAGES,
    PRIORITY,
    RETURNS,
    SAMPLING_DEFAULTS,
    SAMPLING_PARAMETERS,
    STREAM,
    STREAM_MAX_RESPONSES_PER_S,
    STREAM_MIN_GAP_MS,
    TEXT_INPUT,
    TO_CONTEXT_END,
)

BOOLS = (STREAM, EXCLUDE_INPUT_IN_OUTPUT, *RETURNS)
INTS = {"n", "max_tokens", "min_tokens", "top_k", "seed", "logprobs", "prompt_logprobs"}
FLOATS = {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"}
OWNED = {"output_kind", "detokenize"}  # set by this model, never by a request
# The keys of StructuredOutputsParams a request may set (one constraint, then its options).
STRUCTURED_FIELDS = (
    *("json", "regex", "choice", "grammar", "json_object", "structural_tag"),
    *("disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"),
)
# The sampling parameters a request may set: vLLM's documented, user-settable SamplingParams
# fields. Not its private or engine-internal ones (_all_stop_token_ids, output_text_buffer_length,
# skip_clone...), nor the debugging/RL ones, nor OWNED.
SAMPLING_FIELDS = frozenset(
    {
        *("n", "max_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p", "seed"),
        *("presence_penalty", "frequency_penalty", "repetition_penalty"),
        *("stop", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "bad_words"),
        *("logprobs", "prompt_logprobs", "skip_special_tokens", "spaces_between_special_tokens"),
        *("logit_bias", "allowed_token_ids", "structured_outputs"),
    }
)
DEFAULT_MAX_TOKENS = 16  # vLLM's own default


class BadRequest(ValueError):
    """A request this model refuses (INVALID_ARG); the message names the request field."""


@dataclass
class Parsed:
    """A request's fields, checked; ``prompt`` is None when ``messages`` carries the chat."""

    prompt: str | None
    messages: list[dict[str, str]] | None
    stream: bool
    exclude_input: bool
    returns: set[str]
    sampling: dict[str, Any]
    priority: int
    lora_name: str | None = None  # the adapter asked for (None: the base model)


def first(array: np.ndarray[Any, Any] | None) -> Any:
    return None if array is None else np.asarray(array, dtype=object).reshape(-1)[0]


def as_text(value: Any, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"{name} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if isinstance(value, str):
        return value
    raise BadRequest(f"{name} must be a string, got {type(value).__name__}")


def parse_messages(text: str) -> list[dict[str, str]]:
    try:
        messages = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"messages is not valid JSON ({exc.msg} at character {exc.pos})") from None
    ok = isinstance(messages, list) and messages
    if not ok or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        raise BadRequest('messages must be a non-empty JSON list of {"role": ..., "content": ...}')
    if not all(isinstance(m.get("role"), str) for m in messages):
        raise BadRequest("messages: every message needs a string 'role'")
    return messages  # type: ignore[no-any-return]


def _convert(key: str, value: Any) -> Any:
    """Numbers and booleans may come as strings (clients of Triton's vLLM backend send them so)."""
    try:
        if key in INTS and not isinstance(value, bool):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if key in FLOATS and not isinstance(value, bool):
            return float(value)
    except (TypeError, ValueError):
        raise BadRequest(f"sampling_parameters.{key} must be a number, got {value!r}") from None
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def parse_sampling(text: str, known: set[str]) -> dict[str, Any]:
    """The sampling parameters a request sets; BadRequest for bad JSON, unknown keys, bad values."""
    return check_sampling(load_sampling(text), known)


def load_sampling(text: str) -> dict[str, Any]:
    """``sampling_parameters`` as a JSON object; BadRequest if it is not one."""
    try:
        params = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"sampling_parameters is not valid JSON ({exc.msg} at character {exc.pos})"
        ) from None
    if not isinstance(params, dict):
        raise BadRequest(f"sampling_parameters must be a JSON object, got {type(params).__name__}")
    return params


def check_sampling(params: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The sampling parameters, checked and converted; BadRequest for unknown keys, bad values."""
    unknown = sorted(k for k in params if k not in known or k in OWNED)
    if unknown:
        raise BadRequest(f"sampling_parameters: unknown key(s) {', '.join(unknown)} (not vLLM sampling)")
    params = {k: _convert(k, v) for k, v in params.items() if v is not None}
    if params.get("temperature", 0.0) < 0:
        raise BadRequest(f"sampling_parameters.temperature must be >= 0, got {params['temperature']}")
    if params.get("max_tokens", 1) < 1:
        raise BadRequest(f"sampling_parameters.max_tokens must be at least 1, got {params['max_tokens']}")
    if params.get("n", 1) < 1:
        raise BadRequest(f"sampling_parameters.n must be at least 1, got {params['n']}")
    return params


def sampling_keys(struct_fields: Any) -> frozenset[str]:
    """The allowed sampling keys that the installed vLLM's SamplingParams has."""
    return SAMPLING_FIELDS & frozenset(struct_fields)


def parse_defaults(text: str, known: set[str]) -> dict[str, Any]:
    """The ``sampling_defaults`` parameter: values for requests that leave them out (models.yaml's
    ``sampling:``); ValueError naming the parameter if bad."""
    try:
        return parse_sampling(text, known)
    except BadRequest as exc:
        raise ValueError(f"parameter {SAMPLING_DEFAULTS}: {exc}") from None


def parse_min_gap(text: str) -> float:
    """The ``stream_min_gap_ms`` parameter in seconds; ValueError naming the parameter if bad."""
    return _number(text, STREAM_MIN_GAP_MS, 1000, "milliseconds from 0 to 1000") / 1000


def parse_max_rate(text: str, default: float) -> float:
    """The ``stream_max_responses_per_s`` parameter ("0": no budget; empty: ``default``);
    ValueError naming the parameter if bad."""
    if not text:
        return default
    return _number(text, STREAM_MAX_RESPONSES_PER_S, float("inf"), "responses a second, 0 or more")


def _number(text: str, parameter: str, below: float, want: str) -> float:
    """A config parameter's number from 0 to ``below`` (a finite one: ``inf`` excluded)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= below or value == float("inf"):
        raise ValueError(f"parameter {parameter}: want {want}, got {text!r}")
    return value


def parse_priority(value: Any) -> int:
    try:
        if isinstance(value, bool) or float(value) != int(value):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"priority must be an integer, got {value!r}") from None


def parse_request(
    get: Callable[[str], np.ndarray[Any, Any] | None],
    parameters: str,
    known: set[str],
    defaults: dict[str, Any] | None = None,
) -> Parsed:
    """Check a request's inputs (``get(name)`` is the input's array or None) and parameters;
    ``defaults`` fill the sampling values it leaves out (a null value counts as left out)."""
    params = json.loads(parameters or "{}")
    raw_priority = first(get(PRIORITY))
    priority = parse_priority(params.pop(PRIORITY, 0) if raw_priority is None else raw_priority)
    sampling_text = first(get(SAMPLING_PARAMETERS))
    sampling_json = as_text(sampling_text, SAMPLING_PARAMETERS) if sampling_text is not None else ""
    if sampling_text is None and params:  # as Triton's vLLM backend: request parameters instead
        sampling_json = json.dumps(params)
    flags = {name: bool(first(get(name))) for name in BOOLS if get(name) is not None}
    stream = flags.get(STREAM, False)
    exclude = flags.get(EXCLUDE_INPUT_IN_OUTPUT, stream)
    if stream and not exclude:
        raise BadRequest("exclude_input_in_output must be true when stream is true")
    prompt, messages = _prompt(get)
    returns = {name for name in RETURNS if flags.get(name)}
    params = load_sampling(sampling_json)
    lora_name = parse_lora_name(params.pop(LORA_KEY, None))
    sampling = {**(defaults or {}), **check_sampling(params, known)}
    return Parsed(prompt, messages, stream, exclude, returns, sampling, priority, lora_name)


def parse_lora_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequest(f"sampling_parameters.{LORA_KEY} must be a non-empty string, got {value!r}")
    return value


def _prompt(
    get: Callable[[str], np.ndarray[Any, Any] | None],
) -> tuple[str | None, list[dict[str, str]] | None]:
    raw_messages = first(get(MESSAGES))
    if raw_messages is not None:
        return None, parse_messages(as_text(raw_messages, MESSAGES))
    raw = first(get(TEXT_INPUT))
    if raw is None:
        raise BadRequest("text_input is required (or messages)")
    prompt = as_text(raw, TEXT_INPUT)
    if not prompt.strip():
        raise BadRequest("text_input is empty")
    return prompt, None


def check_length(n_prompt: int, sampling: dict[str, Any], max_model_len: int, field: str = TEXT_INPUT) -> int:
    """max_tokens to use, by vLLM's OpenAI server's rule (``get_max_tokens``, ``TokenizeParams``): a
    max_tokens above max_model_len is refused in its words; one that fits max_model_len but not
    beside the prompt is capped at the room left, so the request stops with ``length``
    (TO_CONTEXT_END asks for that room); BadRequest when the prompt alone fills max_model_len."""
    if n_prompt >= max_model_len:
        raise BadRequest(
            f"{field} is {n_prompt} tokens, the model's max_model_len is {max_model_len} "
            "(prompt and output together)"
        )
    asked = int(sampling.get("max_tokens", DEFAULT_MAX_TOKENS))
    if max_model_len < asked != TO_CONTEXT_END:
        raise BadRequest(
            f"max_tokens={asked} cannot be greater than max_model_len={max_model_len}. Please request "
            f"fewer output tokens. (parameter=max_tokens, value={asked})"
        )
    return min(asked, max_model_len - n_prompt)


def sampling_params(fields: dict[str, Any], **owned: Any) -> Any:
    """vLLM's SamplingParams from a request's fields; BadRequest naming the field vLLM refuses."""
    from vllm.exceptions import VLLMClientError
    from vllm.sampling_params import SamplingParams

    if fields.get("structured_outputs") is not None:
        fields = dict(fields, structured_outputs=structured_outputs(fields["structured_outputs"]))
    if fields.get("logit_bias") is not None:
        fields = dict(fields, logit_bias=logit_bias(fields["logit_bias"]))
    try:
        return SamplingParams(**fields, **owned)
    except (TypeError, ValueError, VLLMClientError) as exc:
        raise BadRequest(refusal(exc) or f"sampling_parameters: {exc}".splitlines()[0]) from None


def logit_bias(value: Any) -> dict[int, float]:
    """``logit_bias`` as vLLM's SamplingParams.from_optional makes it (JSON keys are strings): token
    ids as integers, biases clamped to [-100, 100]; BadRequest naming a key or value that is not a
    number. Ids outside the vocabulary are the engine's to refuse (it knows the vocabulary's size)."""
    name = "sampling_parameters.logit_bias"
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be a JSON object of token id -> bias, got {type(value).__name__}")
    made: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise BadRequest(f"{name}: key {key!r} is not an integer token id") from None
        if isinstance(bias, bool) or not isinstance(bias, (int, float)):
            raise BadRequest(f"{name}[{key}] must be a number, got {bias!r}")
        made[token] = min(100.0, max(-100.0, float(bias)))
    return made


def structured_outputs(value: Any) -> Any:
    """vLLM's StructuredOutputsParams from a JSON object (or JSON text, as Triton's vLLM backend
    takes it); BadRequest for bad JSON, unknown keys, or a constraint vLLM refuses."""
    from vllm.exceptions import VLLMClientError
    from vllm.sampling_params import StructuredOutputsParams

    name = "sampling_parameters.structured_outputs"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"{name} is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be a JSON object, got {type(value).__name__}")
    unknown = sorted(k for k in value if k not in STRUCTURED_FIELDS)
    if unknown:
        raise BadRequest(f"{name}: unknown key(s) {', '.join(unknown)} (want {', '.join(STRUCTURED_FIELDS)})")
    try:
        return StructuredOutputsParams(**value)
    except (TypeError, ValueError, VLLMClientError) as exc:
        raise BadRequest(f"{name}: {exc.args[0] if exc.args else exc}".splitlines()[0]) from None


def refusal(exc: BaseException) -> str | None:
    """The INVALID_ARG message for vLLM's request-validation errors (VLLMClientError), else None."""
    from vllm.exceptions import VLLMClientError

    if not isinstance(exc, VLLMClientError):
        return None
    message = (str(exc.args[0]) if exc.args else type(exc).__name__).splitlines()[0]
    parameter = getattr(exc, "parameter", None)
    return f"sampling_parameters{'.' + parameter if parameter else ''}: {message}"
