"""Responses: a request in flight (``Job``), the responses made from the engine's outputs as Triton's
vLLM backend makes them, and the sending thread that alone sends them and asks ``is_cancelled()``."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..contract import (
    CUMULATIVE_LOGPROB,
    FINISH_REASON,
    LOGPROBS,
    NUM_INPUT_TOKENS,
    NUM_OUTPUT_TOKENS,
    RETURN_CUMULATIVE_LOGPROB,
    RETURN_FINISH_REASON,
    RETURN_LOGPROBS,
    RETURN_NUM_INPUT_TOKENS,
    RETURN_NUM_OUTPUT_TOKENS,
    TEXT_OUTPUT,
)
from .requests import Parsed

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

WATCH_PERIOD = 0.05  # seconds between cancellation checks of a request without streamed responses
STALL_PERIOD = 0.5  # seconds after which a streamed request whose responses stopped is asked again
# Seconds between two questions of a streamed request whose responses flow (asked after one): at
# 0.05 a stream of 15-20 tokens/s was asked after nearly every token, a round trip to the server
# as dear as the response's; a cancelled stream now runs at most this long before it is stopped.
STREAM_ASK_PERIOD = 0.2


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
    asked: float = 0.0  # when the sending thread last asked is_cancelled() (time.monotonic())
    streaming: bool = False  # a streamed (not final) response went out: asked after each one
    n: int = 1  # completions (sampling_parameters.n)
    lora: Any = None  # vLLM's LoRARequest (None: the base model)
    last: dict[int, Any] = field(default_factory=dict)  # n > 1, streamed: each completion's last piece
    # The engine's outputs the next response carries; ``queued``: that response is in the outbox.
    pending: list[Any] = field(default_factory=list)
    queued: bool = False
    last_sent: float = float("-inf")  # when the sending thread took the last response's outputs (monotonic)
    timer: Any = None  # the event loop's handle that queues the next response once min_gap has passed
    in_line: bool = False  # waiting for a slot of the model's response budget (Sending.in_line)

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
    """A completion with nothing new in a streamed step, or the pieces of several steps joined."""

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
    if RETURN_CUMULATIVE_LOGPROB in returns:
        made[CUMULATIVE_LOGPROB] = ([p.cumulative_logprob for p in pieces], np.float32)  # None: NaN
    if RETURN_LOGPROBS in returns:
        made[LOGPROBS] = (
            [_logprobs_json(p.logprobs, getattr(p, "token_ids", ())) for p in pieces],
            np.object_,
        )
    return made


def _logprobs_json(logprobs: list[Any] | None, token_ids: Any) -> bytes:
    if logprobs is None:
        return b"null"
    chosen = list(token_ids) if len(token_ids) == len(logprobs) else [None] * len(logprobs)
    return json.dumps([_position(p, t) for p, t in zip(logprobs, chosen, strict=True)]).encode("utf-8")


def _position(position: Any, chosen: int | None) -> dict[int, dict[str, Any]]:
    """One token's candidates, the sampled token (``chosen``) first, as vLLM orders them: clients
    (the OpenAI endpoint) read the first as the token that was generated."""
    order = sorted(position, key=lambda token: token != chosen)  # stable: vLLM's order otherwise
    return {
        token: {"logprob": position[token].logprob, "rank": position[token].rank,
                "decoded_token": position[token].decoded_token}
        for token in order
    }  # fmt: skip


def response(job: Job, texts: list[str], pieces: list[Any]) -> Any:
    """One response: each output has one element per completion (n), in index order, as Triton's
    vLLM backend sends them; ``num_input_tokens`` one."""
    made: dict[str, tuple[list[Any], Any]] = {TEXT_OUTPUT: ([t.encode("utf-8") for t in texts], np.object_)}
    if RETURN_FINISH_REASON in job.parsed.returns:
        made[FINISH_REASON] = ([str(p.finish_reason).encode("utf-8") for p in pieces], np.object_)
    made.update(logprob_outputs(job.parsed.returns, pieces))
    if RETURN_NUM_INPUT_TOKENS in job.parsed.returns:
        made[NUM_INPUT_TOKENS] = ([len(job.token_ids)], np.uint32)
    if RETURN_NUM_OUTPUT_TOKENS in job.parsed.returns:
        made[NUM_OUTPUT_TOKENS] = ([len(p.token_ids) for p in pieces], np.uint32)
    outputs = [tensor(name, values, dtype) for name, (values, dtype) in made.items() if name in job.wanted]
    return pb_utils.InferenceResponse(output_tensors=outputs)


def merged(pieces: list[Any]) -> Any:
    """One completion's pieces of consecutive engine outputs as one: texts, tokens and logprobs
    joined, the last finish reason and cumulative logprob."""
    if len(pieces) == 1:
        return pieces[0]
    found = [p.logprobs for p in pieces if p.logprobs is not None]
    logprobs = [step for steps in found for step in steps] if found else None
    tokens = tuple(t for p in pieces for t in getattr(p, "token_ids", ()))
    text, last = "".join(p.text for p in pieces), pieces[-1]
    return Quiet(last.finish_reason, last.cumulative_logprob, logprobs, text, tokens)


def output_response(job: Job, outs: list[Any]) -> Any:
    """The response for consecutive engine outputs (the prompt before each text when echoed)."""
    steps = [job.completions(out) for out in outs]
    pieces = [merged([step[i] for step in steps]) for i in range(len(steps[0]))]
    echo = job.prompt_text if not job.parsed.stream and not job.parsed.exclude_input else ""
    return response(job, [echo + p.text for p in pieces], pieces)


def error(message: str, code: Any = None) -> Any:
    code = pb_utils.TritonError.INVALID_ARG if code is None else code
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
