"""Triton Python-backend model (decoupled) running vLLM's asynchronous engine inside tritonserver.

Speaks the interface of Triton's vLLM backend: inputs ``text_input``, ``stream``,
``sampling_parameters`` (JSON), ``exclude_input_in_output``, ``return_finish_reason``,
``return_cumulative_logprob``, ``return_logprobs``, ``return_num_input_tokens``,
``return_num_output_tokens``; outputs ``text_output``, ``finish_reason``, ``cumulative_logprob``,
``logprobs`` (JSON: per new token, ``{token_id: {logprob, rank, decoded_token}}``; ``null`` unless
``sampling_parameters.logprobs`` is set), ``num_input_tokens``, ``num_output_tokens``.
Engine arguments come from ``model.json`` in the version folder (``model`` may be relative to that
folder). LoRA as in Triton's vLLM backend: with ``enable_lora`` in model.json, ``multi_lora.json`` in
the version folder maps adapter names to folders (relative ones resolved against the version folder
here), and a request names its adapter with ``lora_name`` in ``sampling_parameters`` (or the request
parameters); without it the base model answers, and an unknown name is refused in that backend's
words, naming the adapters there are. Beyond that interface: ``messages`` (a JSON list of chat
messages rendered with the tokenizer's chat template) and ``priority`` (an input or a request
parameter; lower runs first, vLLM's convention).

The engine runs on its own event loop thread; responses go out through one sender thread so the
loop never waits on the server. That thread alone asks ``is_cancelled()``, and only of requests
whose final response it has not sent (python_backend frees a sender with its final response).
A request finding ``max_num_seqs + max_waiting_requests`` requests in flight is refused at once.
Lanes (config parameter ``lanes``) give long jobs engines of their own: a request whose prompt plus
``max_tokens`` reaches a lane's ``min_tokens``, whose ``max_tokens`` reaches its ``min_max_tokens`` or
whose prompt reaches its ``min_prompt_tokens`` runs there, so short requests never queue behind them.
Each lane's engine gets CPUs of its own (``place_lanes``); where the host cannot give every engine one
beside the server's, the long lanes run on the default engine at a lower priority instead.
The config parameter ``sampling_defaults`` (models.yaml's ``sampling:``) fills the sampling values a
request leaves out or sends as null; without it vLLM's own defaults apply (``max_tokens`` 16).
Unloading drains, as Triton's vLLM backend does: requests in flight run to their end and their final
responses go out before the engines stop. A helper thread that meets an error logs it and goes on;
one that dies, or an engine whose core process died, makes the model answer UNAVAILABLE, and with
the config parameter ``ENABLE_VLLM_HEALTH_CHECK`` (that backend's) unload itself, so that it stops
being READY (a model can unload itself only under explicit model control).
Metrics: those of Triton's vLLM backend (``vllm:prompt_tokens_total``, ``vllm:e2e_request_latency_seconds``
..., with its buckets and its labels, model and version), ``vllm:kv_cache_usage_perc``
(vLLM's own name) and ``tritonforge:requests_refused_total``, on Triton's metrics port.
The parsing helpers below import without Triton or vLLM, so tests call them directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import locale
import os
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

ENGINE_ARGS_FILE = "model.json"
MULTI_LORA_FILE = "multi_lora.json"  # Triton's vLLM backend's file: adapter name -> folder
LORA_KEY = "lora_name"  # the sampling_parameters key naming a request's adapter (that backend's)
LORA_NAMES = "lora_names"  # config parameter: the adapters' names, as the builder wrote them
OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"
SERVER_CPUS = 1  # left to tritonserver and this stub's threads, as vLLM's own CPU binding leaves one
FOLDED_PRIORITY = 1  # a lane folded into the default engine runs after the default lane's requests
REFUSED = "engine is full"  # clients map this phrase to RequestRejected
RETURNS = (
    *("return_finish_reason", "return_cumulative_logprob", "return_logprobs"),
    *("return_num_input_tokens", "return_num_output_tokens"),
)
BOOLS = ("stream", "exclude_input_in_output", *RETURNS)
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
WATCH_PERIOD = 0.05  # seconds between cancellation checks (on the sending thread)
# The stub's threads (tokenizing, vLLM's output handling, sending) run this much nicer than the
# engines' processes (than the stub was when it started them). On a CPU host they share the cores
# with the engine core, whose OMP worker stalls a whole decoding step when another thread takes
# its core: at the same nice value the served model's rounds at 16 streams dropped to half the
# tokens/s now and then, the engine using as much CPU (bench/results/llm_per_token.json,
# runs.nice5).
FRONTEND_NICE = 5
HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"  # the config parameter of Triton's vLLM backend
UNHEALTHY = "Model is unavailable due to unhealthy vLLM engine"  # that backend's words


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


# -- parsing (no Triton, no vLLM) ------------------------------------------------------------------


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
        raise ValueError(f"parameter sampling_defaults: {exc}") from None


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
    raw_priority = first(get("priority"))
    priority = parse_priority(params.pop("priority", 0) if raw_priority is None else raw_priority)
    sampling_text = first(get("sampling_parameters"))
    sampling_json = as_text(sampling_text, "sampling_parameters") if sampling_text is not None else ""
    if sampling_text is None and params:  # as Triton's vLLM backend: request parameters instead
        sampling_json = json.dumps(params)
    flags = {name: bool(first(get(name))) for name in BOOLS if get(name) is not None}
    stream = flags.get("stream", False)
    exclude = flags.get("exclude_input_in_output", stream)
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


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter of multi_lora.json: its name, vLLM's id for it (its place there, from 1, as
    Triton's vLLM backend numbers them) and its folder."""

    name: str
    id: int
    path: str


def parse_multi_lora(version_dir: Path, engine_config: dict[str, Any]) -> dict[str, Adapter] | None:
    """The adapters of ``multi_lora.json`` when model.json sets ``enable_lora`` (true or "true", as
    that backend reads it), else None; relative folders are resolved against the version folder.
    FileNotFoundError or ValueError naming the file when it is missing or bad."""
    if str(engine_config.get("enable_lora", False)).lower() != "true":
        return None
    path = version_dir / MULTI_LORA_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; {ENGINE_ARGS_FILE} sets enable_lora, and this file names the adapters "
            "(a JSON object: name -> adapter folder)"
        )
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path}: must be a non-empty JSON object of adapter name -> folder")
    adapters: dict[str, Adapter] = {}
    for i, (name, folder) in enumerate(table.items(), start=1):
        if not name or not isinstance(folder, str) or not folder:
            raise ValueError(
                f"{path}: adapter {name!r}: its folder must be a non-empty string, got {folder!r}"
            )
        local = version_dir / folder
        resolved = str(local) if not Path(folder).is_absolute() and local.exists() else folder
        adapters[name] = Adapter(name, i, resolved)
    return adapters


def check_lora_names(parameter: str, adapters: dict[str, Adapter] | None) -> None:
    """The config's ``lora_names`` (what the OpenAI endpoint lists), when set, must be the adapters
    of multi_lora.json; ValueError saying both otherwise."""
    if not parameter:
        return
    try:
        names = json.loads(parameter)
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list):
        raise ValueError(f"parameter {LORA_NAMES}: not a JSON list ({parameter!r})")
    found = sorted(adapters or {})
    if sorted(names) != found:
        raise ValueError(
            f"parameter {LORA_NAMES} {sorted(names)} does not match the adapters of {MULTI_LORA_FILE} {found}"
        )


def choose_adapter(lora_name: str | None, adapters: dict[str, Adapter] | None) -> Adapter | None:
    """The adapter a request asked for; BadRequest in the words of Triton's vLLM backend when
    LoRA is off or the name is not one of multi_lora.json's."""
    if lora_name is None:
        return None
    if adapters is None:
        raise BadRequest("LoRA feature is not enabled.")
    if lora_name not in adapters:
        raise BadRequest(f"LoRA {lora_name} is not supported, we currently support {list(adapters)}")
    return adapters[lora_name]


def lora_request(adapter: Adapter | None) -> Any:
    """vLLM's LoRARequest for an adapter (None: the base model)."""
    if adapter is None:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(adapter.name, adapter.id, adapter.path)


def _prompt(
    get: Callable[[str], np.ndarray[Any, Any] | None],
) -> tuple[str | None, list[dict[str, str]] | None]:
    raw_messages = first(get("messages"))
    if raw_messages is not None:
        return None, parse_messages(as_text(raw_messages, "messages"))
    raw = first(get("text_input"))
    if raw is None:
        raise BadRequest("text_input is required (or messages)")
    prompt = as_text(raw, "text_input")
    if not prompt.strip():
        raise BadRequest("text_input is empty")
    return prompt, None


def check_length(
    n_prompt: int, sampling: dict[str, Any], max_model_len: int, field: str = "text_input"
) -> int:
    """max_tokens to use: the request's (or the default) capped at the room the context leaves, so a
    request asking beyond it runs to the context's end and stops with ``length`` (as vLLM and
    Triton's vLLM backend do); BadRequest when the prompt alone fills max_model_len."""
    if n_prompt >= max_model_len:
        raise BadRequest(
            f"{field} is {n_prompt} tokens, the model's max_model_len is {max_model_len} "
            "(prompt and output together)"
        )
    return min(int(sampling.get("max_tokens", DEFAULT_MAX_TOKENS)), max_model_len - n_prompt)


def sampling_params(fields: dict[str, Any], **owned: Any) -> Any:
    """vLLM's SamplingParams from a request's fields; BadRequest naming the field vLLM refuses."""
    from vllm.exceptions import VLLMClientError
    from vllm.sampling_params import SamplingParams

    if fields.get("structured_outputs") is not None:
        fields = dict(fields, structured_outputs=structured_outputs(fields["structured_outputs"]))
    try:
        return SamplingParams(**fields, **owned)
    except (TypeError, ValueError, VLLMClientError) as exc:
        raise BadRequest(refusal(exc) or f"sampling_parameters: {exc}".splitlines()[0]) from None


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


def yield_to_engines() -> None:
    """Every thread of this process (not the engines' processes, started before) FRONTEND_NICE
    nicer than now. Linux keeps a nice value per thread, and a thread started later inherits its
    starter's: passes repeat until one finds every thread done. A host that refuses (no /proc,
    a policy) keeps the threads as they are and says so."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, 0) + FRONTEND_NICE)
    try:
        for _ in range(5):
            changed = [_renice(int(tid), target) for tid in os.listdir("/proc/self/task")]
            if not any(changed):
                return
    except OSError as exc:
        pb_utils.Logger.log_warn(f"vllm_engine: the stub's threads keep their priority ({exc})")


def _renice(tid: int, target: int) -> bool:
    """Set the thread's nice value to ``target``; whether it had another."""
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) == target:
            return False
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except ProcessLookupError:  # the thread ended meanwhile
        return False
    return True


def engine_args(version_dir: Path) -> dict[str, Any]:
    """model.json, with a relative ``model`` (or ``tokenizer``) resolved against the version folder."""
    path = version_dir / ENGINE_ARGS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; it holds the vLLM engine arguments")
    args: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for key in ("model", "tokenizer"):
        if key in args and not Path(args[key]).is_absolute() and (version_dir / args[key]).exists():
            args[key] = str(version_dir / args[key])
    return args


@dataclass(frozen=True)
class LaneRule:
    """An engine of its own for long requests: those whose prompt + max_tokens reach ``min_tokens``,
    whose max_tokens reaches ``min_max_tokens`` or whose prompt reaches ``min_prompt_tokens``
    (any threshold set and reached)."""

    name: str
    min_tokens: int | None = None
    max_num_seqs: int | None = None  # None: model.json's
    max_waiting: int | None = None  # None: the lane's max_num_seqs
    cpus: str | None = None  # VLLM_CPU_OMP_THREADS_BIND for this lane's engine (CPU)
    min_max_tokens: int | None = None
    min_prompt_tokens: int | None = None
    kv_cache_space_gib: float | None = None  # None: model.json's
    priority: int = 0  # above 0: no engine of its own, its requests run on the default one at this

    @property
    def shares_default(self) -> bool:
        return self.priority > 0

    @property
    def thresholds(self) -> tuple[int | None, int | None, int | None]:
        return self.min_tokens, self.min_max_tokens, self.min_prompt_tokens

    def takes(self, n_prompt: int, max_tokens: int) -> bool:
        reached = (n_prompt + max_tokens, max_tokens, n_prompt)
        return any(t is not None and n >= t for t, n in zip(self.thresholds, reached, strict=True))


def parse_lanes(text: str) -> list[LaneRule]:
    """The ``lanes`` parameter (a JSON list of rules) after the default lane; ValueError if bad."""
    try:
        items = json.loads(text) if text.strip() else []
        rules = [LaneRule(**item) for item in items]
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"parameter lanes: {exc} (want a JSON list of {{name, min_tokens, ...}})") from None
    names = [r.name for r in rules]
    if "default" in names or len(set(names)) != len(names):
        raise ValueError(f"parameter lanes: names must be unique and not 'default', got {names}")
    for r in rules:
        given = [t for t in r.thresholds if t is not None]
        if not given:
            raise ValueError(
                f"parameter lanes: {r.name} needs min_tokens, min_max_tokens or min_prompt_tokens"
            )
        if any(t < 1 for t in given):
            raise ValueError(f"parameter lanes: {r.name}: thresholds must be >= 1, got {given}")
    return [LaneRule("default"), *sorted(rules, key=lambda r: r.min_tokens or 0)]


def route(rules: list[LaneRule], n_prompt: int, max_tokens: int) -> int:
    """The index of the last lane that takes the request (rules[0], the default lane, takes all)."""
    return max((i for i, r in enumerate(rules) if r.takes(n_prompt, max_tokens)), default=0)


def place_lanes(rules: list[LaneRule], cpus: list[int]) -> list[LaneRule]:
    """The lanes with CPUs of their own for each engine (``cpus``), the last SERVER_CPUS left to the
    server; where too few remain for one per engine, the long lanes folded into the default engine
    at FOLDED_PRIORITY. Two engines on the same cores make short requests slower, not faster.
    Rules that name their CPUs or a priority are kept as written."""
    if len(rules) == 1 or any(r.cpus or r.shares_default for r in rules):
        return rules
    usable = sorted(cpus)[: max(0, len(cpus) - SERVER_CPUS)]
    if len(usable) < len(rules):
        return [rules[0], *(dataclasses.replace(r, priority=FOLDED_PRIORITY) for r in rules[1:])]
    share, extra = divmod(len(usable), len(rules))  # the remainder to the default lane, the busiest
    placed, start = [], 0
    for i, rule in enumerate(rules):
        count = share + (extra if i == 0 else 0)
        placed.append(dataclasses.replace(rule, cpus=",".join(map(str, usable[start : start + count]))))
        start += count
    return placed


def placement_note(rules: list[LaneRule], cpus: int) -> str:
    """One line saying where each lane runs."""
    folded = [r.name for r in rules if r.shares_default]
    if folded:
        return (
            f"lanes: {cpus} CPUs cannot give each of {len(rules)} engines one of its own beside the "
            f"server's: {', '.join(folded)} run(s) on the default engine at lower priority"
        )
    return "lanes: " + ", ".join(f"{r.name} on CPUs {r.cpus or 'auto'}" for r in rules)


def lane_engine_args(config: dict[str, Any], rule: LaneRule) -> dict[str, Any]:
    """model.json's engine arguments with the lane's own max_num_seqs and KV-cache size (CPU)."""
    config = dict(config)
    if rule.max_num_seqs:
        config["max_num_seqs"] = rule.max_num_seqs
    if rule.kv_cache_space_gib:
        config["kv_cache_memory_bytes"] = int(rule.kv_cache_space_gib * (1 << 30))
    return config


def config_parameter(config: dict[str, Any], name: str, default: str) -> str:
    value = config.get("parameters", {}).get(name, {}).get("string_value", "")
    return str(value) if value else default


# -- one request in flight -------------------------------------------------------------------------


@dataclass
class Job:
    """A request admitted to the engine."""

    sender: Any
    parsed: Parsed
    prompt_text: str
    token_ids: list[int]
    sampling: Any
    lane: Any  # the Lane it runs on
    # The outputs the request asked for (all when it named none). Only these are sent: the 2.51
    # stub drops the others inside send() without the GIL, which is unsafe off its own thread.
    wanted: frozenset[str]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    task: Any = None  # the asyncio task generating it, set on the event loop
    done: bool = False
    n: int = 1  # completions (sampling_parameters.n)
    lora: Any = None  # vLLM's LoRARequest (None: the base model)
    last: dict[int, Any] = field(default_factory=dict)  # n > 1, streamed: each completion's last piece

    def completions(self, out: Any) -> list[Any]:
        """The n completions of one engine output, in index order. Streamed with n > 1, vLLM sends
        only those with new tokens; the others stand as Quiet pieces (no text, no tokens, their
        finish reason and cumulative logprob so far), so every response has n of each output."""
        if self.n == 1:
            return [out.outputs[0]]
        fresh = {piece.index: piece for piece in out.outputs}
        self.last.update(fresh)
        with_logprobs = getattr(self.sampling, "logprobs", None) is not None
        return [fresh.get(i) or quiet(self.last.get(i), with_logprobs) for i in range(self.n)]


@dataclass(frozen=True)
class Quiet:
    """A completion with nothing new in a streamed step."""

    finish_reason: Any = None
    cumulative_logprob: float | None = None
    logprobs: list[Any] | None = None
    text: str = ""
    token_ids: tuple[int, ...] = ()


def quiet(last: Any, with_logprobs: bool) -> Quiet:
    if last is None:
        return Quiet(logprobs=[] if with_logprobs else None)
    return Quiet(last.finish_reason, last.cumulative_logprob, [] if with_logprobs else None)


def tensor(name: str, values: list[Any], dtype: Any) -> Any:
    return pb_utils.Tensor(name, np.asarray(values, dtype=dtype))


def logprob_outputs(returns: set[str], pieces: list[Any]) -> dict[str, tuple[list[Any], Any]]:
    """``cumulative_logprob`` and ``logprobs`` of each completion (vLLM's CompletionOutput, whose
    logprobs are the new tokens' alone when streamed), as Triton's vLLM backend writes them."""
    made: dict[str, tuple[list[Any], Any]] = {}
    if "return_cumulative_logprob" in returns:
        made["cumulative_logprob"] = ([p.cumulative_logprob for p in pieces], np.float32)  # None: NaN
    if "return_logprobs" in returns:
        made["logprobs"] = ([_logprobs_json(p.logprobs) for p in pieces], np.object_)
    return made


def _logprobs_json(logprobs: list[Any] | None) -> bytes:
    return json.dumps(None if logprobs is None else [_position(p) for p in logprobs]).encode("utf-8")


def _position(position: Any) -> dict[int, dict[str, Any]]:
    return {
        token: {"logprob": p.logprob, "rank": p.rank, "decoded_token": p.decoded_token}
        for token, p in position.items()
    }


def response(job: Job, texts: list[str], pieces: list[Any]) -> Any:
    """One response: each output has one element per completion (n), in index order, as Triton's
    vLLM backend sends them; ``num_input_tokens`` one."""
    made: dict[str, tuple[list[Any], Any]] = {"text_output": ([t.encode("utf-8") for t in texts], np.object_)}
    if "return_finish_reason" in job.parsed.returns:
        made["finish_reason"] = ([str(p.finish_reason).encode("utf-8") for p in pieces], np.object_)
    made.update(logprob_outputs(job.parsed.returns, pieces))
    if "return_num_input_tokens" in job.parsed.returns:
        made["num_input_tokens"] = ([len(job.token_ids)], np.uint32)
    if "return_num_output_tokens" in job.parsed.returns:
        made["num_output_tokens"] = ([len(p.token_ids) for p in pieces], np.uint32)
    outputs = [tensor(name, values, dtype) for name, (values, dtype) in made.items() if name in job.wanted]
    return pb_utils.InferenceResponse(output_tensors=outputs)


def output_response(job: Job, out: Any) -> Any:
    """The response for one engine output (the prompt before each text when echoed)."""
    pieces = job.completions(out)
    echo = job.prompt_text if not job.parsed.stream and not job.parsed.exclude_input else ""
    return response(job, [echo + p.text for p in pieces], pieces)


def error(message: str, code: Any = None) -> Any:
    code = pb_utils.TritonError.INVALID_ARG if code is None else code
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


# -- metrics ---------------------------------------------------------------------------------------


# Triton's vLLM backend's metrics (its src/utils/metrics.py): the names, buckets and labels (model,
# version) its users' dashboards read. Histograms without buckets here take vLLM's 1-2-5 series up
# to max_model_len, as there.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
PHASE_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
N_BUCKETS = (1, 2, 5, 10, 20)
STEP_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MAX_PENDING_UPDATES = 10_000  # engine steps whose metrics wait for the metrics thread; then dropped


@dataclass(frozen=True)
class MetricSpec:
    name: str
    description: str
    kind: str  # a pb_utils.MetricFamily kind: COUNTER, GAUGE or HISTOGRAM
    buckets: tuple[float, ...] | None = None  # histograms only; None: 1-2-5 up to max_model_len


def _histogram(name: str, description: str, buckets: tuple[float, ...] | None = None) -> MetricSpec:
    return MetricSpec(name, description, "HISTOGRAM", buckets)


METRICS = (
    MetricSpec("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "COUNTER"),
    MetricSpec("vllm:generation_tokens_total", "Number of generation tokens processed.", "COUNTER"),
    MetricSpec("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", "COUNTER"),
    _histogram(
        "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", STEP_TOKEN_BUCKETS
    ),
    _histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
    ),
    _histogram(
        "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", TPOT_BUCKETS
    ),
    _histogram(
        "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", E2E_BUCKETS
    ),
    _histogram("vllm:request_queue_time_seconds", "Time spent in WAITING phase for request.", PHASE_BUCKETS),
    _histogram(
        "vllm:request_inference_time_seconds", "Time spent in RUNNING phase for request.", PHASE_BUCKETS
    ),
    _histogram(
        "vllm:request_prefill_time_seconds", "Time spent in PREFILL phase for request.", PHASE_BUCKETS
    ),
    _histogram("vllm:request_decode_time_seconds", "Time spent in DECODE phase for request.", PHASE_BUCKETS),
    _histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    _histogram("vllm:request_generation_tokens", "Number of generation tokens processed."),
    _histogram("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS),
    _histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    MetricSpec("vllm:num_requests_running", "Number of requests currently running.", "GAUGE"),
    MetricSpec("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "GAUGE"),
    MetricSpec("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "GAUGE"),
    # vLLM's own name for the same figure since its V1 engine, as its OpenAI server exports it.
    MetricSpec("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "GAUGE"),
    MetricSpec("tritonforge:requests_refused_total", "Requests refused: engine full", "COUNTER"),
)
REFUSED_METRIC = "tritonforge:requests_refused_total"
KINDS = {spec.name: spec.kind for spec in METRICS}


def metric_families() -> dict[str, Any] | None:
    """The custom metric families by name; None when the server has metrics off."""
    family = pb_utils.MetricFamily
    try:
        return {
            spec.name: family(spec.name, spec.description, getattr(family, spec.kind)) for spec in METRICS
        }
    except Exception as exc:  # "metrics not supported" when started with --allow-metrics=false
        pb_utils.Logger.log_warn(f"vllm_engine: custom metrics off ({exc})")
        return None


def metric_buckets(spec: MetricSpec, max_model_len: int) -> list[float]:
    from vllm.v1.metrics.buckets import build_1_2_5_buckets

    return list(spec.buckets) if spec.buckets is not None else list(build_1_2_5_buckets(max_model_len))


def stat_updates(scheduler: Any, iteration: Any) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """One engine step's figures, as Triton's vLLM backend reports them: the gauges' values and
    the (metric, value) pairs that counters add and histograms observe."""
    gauges: dict[str, float] = {}
    if scheduler is not None:
        gauges["vllm:num_requests_running"] = scheduler.num_running_reqs
        gauges["vllm:num_requests_waiting"] = scheduler.num_waiting_reqs
        gauges["vllm:gpu_cache_usage_perc"] = gauges["vllm:kv_cache_usage_perc"] = scheduler.kv_cache_usage
    if iteration is None:
        return gauges, []
    prompt, generated = iteration.num_prompt_tokens, iteration.num_generation_tokens
    counts = [
        ("vllm:prompt_tokens_total", prompt),
        ("vllm:generation_tokens_total", generated),
        ("vllm:num_preemptions_total", iteration.num_preempted_reqs),
        ("vllm:iteration_tokens_total", prompt + generated),
    ]
    added = [(name, value) for name, value in counts if value]
    added += [("vllm:time_to_first_token_seconds", t) for t in iteration.time_to_first_tokens_iter]
    added += [("vllm:time_per_output_token_seconds", t) for t in iteration.inter_token_latencies_iter]
    added += [("vllm:request_params_n", n) for n in iteration.n_params_iter]
    for done in iteration.finished_requests:
        added += [
            ("vllm:e2e_request_latency_seconds", done.e2e_latency),
            ("vllm:request_queue_time_seconds", done.queued_time),
            ("vllm:request_inference_time_seconds", done.inference_time),
            ("vllm:request_prefill_time_seconds", done.prefill_time),
            ("vllm:request_decode_time_seconds", done.decode_time),
            ("vllm:request_prompt_tokens", done.num_prompt_tokens),
            ("vllm:request_generation_tokens", done.num_generation_tokens),
        ]
        if done.max_tokens_param is not None:
            added.append(("vllm:request_params_max_tokens", done.max_tokens_param))
    return gauges, added


class Metrics:
    """One lane's custom metrics on Triton's metrics port; a no-op when metrics are off.

    Each update is a round trip to the server: a thread of its own makes them, so the engine's
    event loop (which calls ``record`` every step) never waits for one. An update that fails is
    logged and the thread goes on; past MAX_PENDING_UPDATES waiting steps, new ones are dropped
    (and counted), so a stalled thread never grows memory without bound.
    """

    def __init__(self, families: dict[str, Any] | None, labels: dict[str, str]) -> None:
        self.families, self.labels = families, labels
        self.on = False
        self.updates: queue.Queue[tuple[Any, Any] | None] = queue.Queue(MAX_PENDING_UPDATES)
        self.metrics: dict[str, Any] = {}
        self.gauges: dict[str, float] = {}  # the values last set: a gauge is set only when it moves
        self.dropped = self.failed = 0
        self.refused = None if families is None else families[REFUSED_METRIC].Metric(labels=labels)

    def start(self, max_model_len: int) -> None:
        """The engine's metrics (its stat logger starts them, knowing max_model_len)."""
        if self.families is None or self.on:
            return
        for spec in METRICS:
            if spec.name != REFUSED_METRIC:
                extra = {"buckets": metric_buckets(spec, max_model_len)} if spec.kind == "HISTOGRAM" else {}
                self.metrics[spec.name] = self.families[spec.name].Metric(labels=self.labels, **extra)
        self.thread = threading.Thread(target=self._update_loop, name="vllm-metrics", daemon=True)
        self.on = True
        self.thread.start()

    def record(self, scheduler: Any, iteration: Any) -> None:
        if not self.on:
            return
        try:
            self.updates.put_nowait((scheduler, iteration))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                pb_utils.Logger.log_error(
                    f"vllm_engine: metrics thread {MAX_PENDING_UPDATES} steps behind: dropping updates"
                )

    def _update_loop(self) -> None:
        while (update := self.updates.get()) is not None:
            try:
                self._apply(*update)
            except Exception:
                self.failed += 1
                if self.failed == 1:  # the first in full; the count at close()
                    pb_utils.Logger.log_error(f"vllm_engine: metrics update failed: {traceback.format_exc()}")

    def _apply(self, scheduler: Any, iteration: Any) -> None:
        """The step's counts first, its gauges last: a reader who sees a step's gauges (the engine
        empty, say) sees its finished requests counted too."""
        gauges, added = stat_updates(scheduler, iteration)
        for name, value in added:
            if KINDS[name] == "COUNTER":
                self.metrics[name].increment(value)
            else:
                self.metrics[name].observe(value)
        for name, value in gauges.items():
            if self.gauges.get(name) != value:
                self.metrics[name].set(value)
                self.gauges[name] = value

    def close(self) -> None:
        """Metrics go before their families (the stub insists on that order)."""
        if self.on:
            self.on = False
            self.updates.put(None)
            self.thread.join(timeout=5)
        if self.failed or self.dropped:
            pb_utils.Logger.log_warn(
                f"vllm_engine: {self.failed} metrics updates failed, {self.dropped} dropped"
            )
        self.metrics, self.refused, self.families = {}, None, None

    def count_refusal(self) -> None:
        if self.refused is not None:
            self.refused.increment(1)


def stat_logger_factory(metrics: Metrics) -> Any:
    """A vLLM stat-logger factory feeding ``metrics`` (the engine calls it once per engine)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class TritonStatLogger(StatLoggerBase):  # type: ignore[misc]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            metrics.start(int(vllm_config.model_config.max_model_len))

        def record(self, scheduler_stats: Any, iteration_stats: Any, *args: Any, **kwargs: Any) -> None:
            metrics.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger


# -- the model -------------------------------------------------------------------------------------


@dataclass
class Lane:
    """One engine and the requests in flight on it."""

    rule: LaneRule
    bound: int  # max_num_seqs + max_waiting
    metrics: Metrics
    engine: Any = None
    inflight: int = 0


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        # The stub runs in the C locale; torch's inductor reads UTF-8 files while vLLM imports.
        locale.setlocale(locale.LC_ALL, "C.UTF-8")
        from vllm.sampling_params import SamplingParams

        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise ValueError(f"model '{args['model_name']}': needs model_transaction_policy decoupled")
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.engine_config = engine_args(version_dir)
        self.adapters = parse_multi_lora(version_dir, self.engine_config)
        check_lora_names(config_parameter(config, LORA_NAMES, ""), self.adapters)
        self.known = set(sampling_keys(SamplingParams.__struct_fields__))
        self.defaults = parse_defaults(config_parameter(config, "sampling_defaults", ""), self.known)
        self.families = metric_families()
        labels = {"model": args["model_name"], "version": args["model_version"]}
        waiting = config_parameter(config, "max_waiting_requests", "")
        cpus = sorted(os.sched_getaffinity(0))
        rules = place_lanes(parse_lanes(config_parameter(config, "lanes", "")), cpus)
        if len(rules) > 1:
            pb_utils.Logger.log_info(f"vllm_engine: {placement_note(rules, len(cpus))}")
        if any(r.shares_default for r in rules):
            self.engine_config["scheduling_policy"] = "priority"
        self.lanes = [self._lane(r, waiting, labels) for r in rules]
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)  # notified as each job posts its final response
        # (job, response, flags); a response of None tells the sending thread to watch the job.
        self.outbox: queue.Queue[tuple[Job, Any, int] | None] = queue.Queue()
        self.name = args["model_name"]
        self.health_check = config_parameter(config, HEALTH_CHECK, "false").lower() == "true"
        self.failure: str | None = None  # why the model cannot serve (the engine or a thread died)
        self._start_engines()
        # The engine's own figure (model.json may leave it to the checkpoint's config).
        self.max_model_len = int(self.lanes[0].engine.model_config.max_model_len)
        self.threads = [
            threading.Thread(target=self._guarded, args=(self._send_loop,), name="vllm-send", daemon=True)
        ]
        for thread in self.threads:
            thread.start()
        yield_to_engines()

    def _lane(self, rule: LaneRule, waiting: str, labels: dict[str, str]) -> Lane:
        seqs = rule.max_num_seqs or int(self.engine_config.get("max_num_seqs", 256))
        if rule.name == "default":
            extra = int(waiting) if waiting else seqs
        else:
            extra = seqs if rule.max_waiting is None else rule.max_waiting
        # The default lane has the labels of Triton's vLLM backend (model, version); others add theirs.
        own = labels if rule.name == "default" else {**labels, "lane": rule.name}
        return Lane(rule, seqs + extra, Metrics(self.families, own))

    def _start_engines(self) -> None:
        from vllm.tokenizers import get_tokenizer

        config = self.engine_config
        # Our own tokenizer instance: requests are tokenized on the stub's thread, not the loop's.
        self.tokenizer = get_tokenizer(config.get("tokenizer") or config["model"])
        self.loop = asyncio.new_event_loop()
        started: queue.Queue[BaseException | None] = queue.Queue()
        self.loop_thread = threading.Thread(
            target=self._run_loop, args=(started,), name="vllm-loop", daemon=True
        )
        self.loop_thread.start()
        outcome = started.get()
        if outcome is not None:
            raise outcome

    def _run_loop(self, started: queue.Queue[BaseException | None]) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            for lane in self.lanes:
                own = not lane.rule.shares_default
                lane.engine = self.loop.run_until_complete(self._create_engine(lane)) if own else None
            for lane in self.lanes:
                lane.engine = lane.engine or self.lanes[0].engine
        except BaseException as exc:
            started.put(exc)
            return
        started.put(None)
        self._guarded(self.loop.run_forever)

    async def _create_engine(self, lane: Lane) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        config = lane_engine_args(self.engine_config, lane.rule)
        factory = stat_logger_factory(lane.metrics)
        previous = os.environ.get(OMP_BIND)
        if lane.rule.cpus:  # read when the engine core process starts
            os.environ[OMP_BIND] = lane.rule.cpus
        try:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**config), stat_loggers=[factory])
        finally:
            if previous is None:
                os.environ.pop(OMP_BIND, None)
            else:
                os.environ[OMP_BIND] = previous

    # -- requests --

    def execute(self, requests: list[Any]) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if self.failure is not None:  # as Triton's vLLM backend answers once its engine is unhealthy
            for request in requests:
                unavailable = error(UNHEALTHY, pb_utils.TritonError.UNAVAILABLE)
                request.get_response_sender().send(unavailable, flags=final)
            return None
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self._job(request, sender)
            except BadRequest as exc:
                sender.send(error(str(exc)), flags=final)
                continue
            except Exception as exc:
                sender.send(error(f"request failed: {exc}", pb_utils.TritonError.INTERNAL), flags=final)
                continue
            if self._admit(job):
                asyncio.run_coroutine_threadsafe(self._generate(job), self.loop)
            else:
                job.lane.metrics.count_refusal()
                sender.send(
                    error(self._full_message(job.lane), pb_utils.TritonError.UNAVAILABLE), flags=final
                )
        return None

    def _admit(self, job: Job) -> bool:
        """Count the job in its lane, or False when the lane is at its bound."""
        with self.lock:
            if job.lane.inflight >= job.lane.bound:
                return False
            job.lane.inflight += 1
            self.jobs[job.id] = job
        return True

    def _full_message(self, lane: Lane) -> str:
        where = f"lane '{lane.rule.name}': " if len(self.lanes) > 1 else ""
        return f"{REFUSED}: {where}{lane.bound} requests running or waiting (max_num_seqs + max_waiting)"

    def _job(self, request: Any, sender: Any) -> Job:
        from vllm.sampling_params import RequestOutputKind

        def get(name: str) -> np.ndarray[Any, Any] | None:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()

        try:
            parsed = parse_request(get, request.parameters(), self.known, self.defaults)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"request parameters are not valid JSON ({exc.msg})") from None
        adapter = choose_adapter(parsed.lora_name, self.adapters)
        text = self._render(parsed)
        ids = list(self.tokenizer.encode(text, add_special_tokens=parsed.messages is None))
        field = "text_input" if parsed.messages is None else "messages"
        max_tokens = check_length(len(ids), parsed.sampling, self.max_model_len, field)
        kind = RequestOutputKind.DELTA if parsed.stream else RequestOutputKind.FINAL_ONLY
        params = sampling_params(dict(parsed.sampling, max_tokens=max_tokens), output_kind=kind)
        lane = self.lanes[route([x.rule for x in self.lanes], len(ids), max_tokens)]
        wanted = frozenset(request.requested_output_names())
        return Job(
            sender, parsed, text, ids, params, lane, wanted, n=int(params.n), lora=lora_request(adapter)
        )

    def _render(self, parsed: Parsed) -> str:
        if parsed.messages is None:
            return str(parsed.prompt)
        chat = self.tokenizer.apply_chat_template(parsed.messages, tokenize=False, add_generation_prompt=True)
        return str(chat)

    async def _generate(self, job: Job) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        job.task = asyncio.current_task()
        self.outbox.put((job, None, 0))  # watched for cancellation from now on, before any response
        try:
            prompt = {"prompt_token_ids": job.token_ids}
            priority = job.parsed.priority + job.lane.rule.priority
            adapter = {"lora_request": job.lora} if job.lora is not None else {}
            stream = job.lane.engine.generate(prompt, job.sampling, job.id, priority=priority, **adapter)
            async for out in stream:
                self._emit(job, out)
        except asyncio.CancelledError:  # the sending thread saw is_cancelled()
            await self._abort(job)
            self._post(job, error("request cancelled", pb_utils.TritonError.CANCELLED), final)
        except Exception as exc:
            refused = refusal(exc)  # the engine's own request checks (for example logprobs' limit)
            if refused is not None:
                self._post(job, error(refused), final)
            else:
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._post(job, error(f"generation failed: {message}", pb_utils.TritonError.INTERNAL), final)
        finally:
            if not job.done:  # the engine ended the stream without a finished output
                self._post(job, error("generation ended early", pb_utils.TritonError.INTERNAL), final)

    async def _abort(self, job: Job) -> None:
        """Abort the request in the engine by its id before its slot is freed: vLLM aborts a
        cancelled generate() itself only once add_request has completed, and a cancel before that
        would leave it generating to max_tokens while the server admits past its bound."""
        try:
            await job.lane.engine.abort(job.id)
        except Exception as exc:  # the engine is gone: nothing left generating
            pb_utils.Logger.log_warn(f"vllm_engine: abort of {job.id} failed ({exc})")

    def _emit(self, job: Job, out: Any) -> None:
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if out.finished else 0
        self._post(job, output_response(job, out), flags)

    def _post(self, job: Job, reply: Any, flags: int) -> None:
        if job.done:
            return
        if flags:
            job.done = True
            with self.lock:
                self.jobs.pop(job.id, None)
                job.lane.inflight -= 1
                self.outbox.put((job, reply, flags))  # queued before finalize() can see no jobs
                self.idle.notify_all()
            return
        self.outbox.put((job, reply, flags))

    # -- threads --

    def _guarded(self, run: Callable[[], None]) -> None:
        """Run a helper thread's loop; should it ever raise, say why and stop serving (UNAVAILABLE,
        and unloaded with the health check on) rather than leave requests waiting on a dead thread."""
        try:
            run()
        except BaseException as exc:
            pb_utils.Logger.log_error(f"vllm_engine: {traceback.format_exc()}")
            self._fail(f"thread {threading.current_thread().name} stopped ({type(exc).__name__}: {exc})")

    def _fail(self, reason: str) -> None:
        """From now on refuse requests as UNAVAILABLE; with ENABLE_VLLM_HEALTH_CHECK, unload the
        model (as Triton's vLLM backend does) so that it stops being READY."""
        with self.lock:
            if self.failure is not None:
                return
            self.failure = reason
        pb_utils.Logger.log_error(f"vllm_engine: {reason}: {UNHEALTHY.lower()}")
        if not self.health_check:
            return
        try:
            pb_utils.unload_model(self.name)  # returns at once; finalize() comes once requests end
        except Exception as exc:  # only explicit model control lets a model unload itself
            pb_utils.Logger.log_error(f"vllm_engine: model '{self.name}' cannot unload itself ({exc})")

    def _send_loop(self) -> None:
        """Send every response; every WATCH_PERIOD, ask the requests not finished yet whether they
        were cancelled, and check that the engines live. Only this thread uses a sender once
        execute() returned, and never after sending its final response, so none is used after
        python_backend has freed it. An error in one step is logged and the loop goes on."""
        watched: dict[str, Job] = {}  # admitted, final response not sent yet: this thread's own
        next_check = time.monotonic() + WATCH_PERIOD
        while True:
            item: tuple[Job, Any, int] | tuple[()] | None
            try:
                item = self.outbox.get(timeout=max(0.0, next_check - time.monotonic()))
            except queue.Empty:
                item = ()
            if item is None:  # finalize()
                return
            try:
                if item:
                    self._handle(item, watched)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + WATCH_PERIOD
                    self._check_cancelled(watched)
                    self._check_engines()
            except Exception:
                pb_utils.Logger.log_error(f"vllm_engine: sending thread: {traceback.format_exc()}")

    def _handle(self, item: tuple[Job, Any, int], watched: dict[str, Job]) -> None:
        job, reply, flags = item
        if reply is None:
            watched[job.id] = job
            return
        if flags:
            watched.pop(job.id, None)
        try:
            job.sender.send(reply, flags=flags)
        except Exception as exc:  # the client went away; nothing to answer
            pb_utils.Logger.log_warn(f"vllm_engine: response to {job.id} not sent ({exc})")

    def _check_cancelled(self, watched: dict[str, Job]) -> None:
        for job in list(watched.values()):
            try:
                cancelled = job.sender.is_cancelled()
            except Exception as exc:  # its sender is unusable: stop asking, let it run to its end
                del watched[job.id]
                pb_utils.Logger.log_warn(f"vllm_engine: is_cancelled() of {job.id} failed ({exc})")
                continue
            if cancelled:
                del watched[job.id]  # its final response (CANCELLED) is still to come
                self.loop.call_soon_threadsafe(job.task.cancel)

    def _check_engines(self) -> None:
        """An engine whose core process died (vLLM's own monitor marks it) fails the model."""
        dead = [lane.rule.name for lane in self.lanes if lane.engine is not None and lane.engine.errored]
        if dead and self.failure is None:
            self._fail(f"the vLLM engine of lane(s) {', '.join(dead)} died")

    def finalize(self) -> None:
        """As Triton's vLLM backend: the requests in flight run to their end and their final
        responses go out, then the threads and the engines stop."""
        self._drain()
        self.outbox.put(None)  # after every final response
        for thread in self.threads:
            thread.join(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=10)
        for lane in self.lanes:
            if not lane.rule.shares_default:
                lane.engine.shutdown()
            lane.engine = None  # AsyncLLM.__del__ shuts down again: let it run now, not at exit
            lane.metrics.close()
        gc.collect()
        self.families = None  # after their metrics

    def _drain(self) -> None:
        """Wait for the requests in flight; cancel them only when nothing can finish them (the
        engine or the event loop died)."""
        with self.idle:
            while self.jobs and self.failure is None and self.loop_thread.is_alive():
                pb_utils.Logger.log_info(f"vllm_engine: awaiting {len(self.jobs)} requests in flight")
                self.idle.wait(timeout=1.0)
            left = [job.task for job in self.jobs.values() if job.task is not None]
        if left and self.loop_thread.is_alive():
            for task in left:
                self.loop.call_soon_threadsafe(task.cancel)
            with self.idle:
                self.idle.wait_for(lambda: not self.jobs, timeout=5.0)
