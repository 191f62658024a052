"""perf_analyzer's ``--profile-export-file`` for a decoupled (streaming) model, as typed records.

The 2.48 binary writes ``{"experiments": [{"experiment": {"mode", "value"}, "requests": [...],
"window_boundaries": [...]}], "version", "service_kind", "endpoint"}``; each request holds its send
``timestamp`` (ns), ``response_timestamps`` (ns, one per streamed response) and
``response_outputs`` (one dict per response, every output as a string). A numeric output such as
``num_output_tokens`` (UINT32) arrives as its raw little-endian bytes, one character per byte.
"""

from __future__ import annotations

import itertools
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clients.perf.errors import PerfError

TOKENS_OUTPUT = "num_output_tokens"


@dataclass(frozen=True)
class StreamedRequest:
    """One request: when it was sent, when each response came, how many tokens each carried."""

    send_ns: int
    response_ns: tuple[int, ...]
    tokens: tuple[int, ...]  # per response

    @property
    def ttft_s(self) -> float:
        return (self.response_ns[0] - self.send_ns) / 1e9

    @property
    def latency_s(self) -> float:
        return (self.response_ns[-1] - self.send_ns) / 1e9

    @property
    def itl_s(self) -> list[float]:
        """The latency of each token after the first: a response carrying k tokens (an engine with
        ``stream_interval`` k) stands for k tokens, each taking 1/k of the gap since the response
        before; a response without tokens (an empty final one) stands for none."""
        pairs = itertools.pairwise(zip(self.response_ns, self.tokens, strict=True))
        return [(b - a) / k / 1e9 for (a, _), (b, k) in pairs for _ in range(k)]

    @property
    def output_tokens(self) -> int:
        return sum(self.tokens)


@dataclass(frozen=True)
class Experiment:
    mode: str  # "concurrency" or "request_rate"
    value: float
    requests: tuple[StreamedRequest, ...]
    unanswered: int  # requests recorded with no response at all


def load(path: Path) -> list[Experiment]:
    """Every experiment of the export; a request without responses is counted, not kept."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return [_experiment(e) for e in raw["experiments"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PerfError(f"{path}: not a perf_analyzer profile export ({exc})") from exc


def _experiment(raw: dict[str, Any]) -> Experiment:
    head = raw["experiment"]
    requests, unanswered = [], 0
    for entry in raw["requests"]:
        stamps = tuple(int(t) for t in entry.get("response_timestamps", []))
        if not stamps:
            unanswered += 1
            continue
        outputs = entry.get("response_outputs") or [{} for _ in stamps]
        if outputs and "response" in outputs[0]:  # an OpenAI-compatible server's SSE chunks
            counted = sse_tokens([out.get("response", "") for out in outputs])
        else:
            counted = [response_tokens(out) for out in outputs]
        # Responses without a token (a role-only first chunk, "[DONE]") are not token arrivals.
        kept = [(t, n) for t, n in zip(stamps, counted, strict=False) if n > 0]
        if not kept:
            unanswered += 1
            continue
        requests.append(StreamedRequest(int(entry["timestamp"]), *map(tuple, zip(*kept, strict=True))))
    return Experiment(str(head["mode"]), float(head["value"]), tuple(requests), unanswered)


def response_tokens(output: dict[str, str]) -> int:
    """Tokens one streamed response carries.

    The model's ``num_output_tokens`` (asked for with ``return_num_output_tokens``) is the engine's
    own count of the tokens in this delta: used when present. Without it a response carrying text
    counts as one token: vLLM streams one response per engine step, and a step adds one token per
    sequence (no speculative decoding here); measured equal to ``num_output_tokens`` with
    ``ignore_eos``.
    """
    raw = output.get(TOKENS_OUTPUT, "")
    if len(raw) == 4:
        return int(struct.unpack("<I", raw.encode("latin-1"))[0])
    return 1 if output.get("text_output", "") else 0


def sse_tokens(chunks: list[str]) -> list[int]:
    """Tokens per server-sent-events response: the change of ``usage.completion_tokens`` (vLLM's
    ``continuous_usage_stats``), else one per chunk carrying text."""
    counts, running = [], 0
    for chunk in chunks:
        n = 0
        for line in chunk.splitlines():
            body = line.removeprefix("data:").strip()
            if not line.startswith("data:") or body == "[DONE]" or not body:
                continue
            event = json.loads(body)
            usage = event.get("usage") or {}
            if "completion_tokens" in usage:
                n += int(usage["completion_tokens"]) - running
                running = int(usage["completion_tokens"])
            else:
                choice = (event.get("choices") or [{}])[0]
                n += 1 if (choice.get("text") or (choice.get("delta") or {}).get("content")) else 0
        counts.append(n)
    return counts
