"""Sequences of a stateful model, without any I/O: the sequence id and where a sequence is.

A stateful model (Triton's sequence batcher) keeps its state in the server, per sequence id: the
client sends one chunk per request, the first with the start flag, the last with the end flag,
which frees the sequence's state. `SequenceState` decides the flags of each request; `client` and
`aio` only send them (tritonclient's `sequence_id`, `sequence_start`, `sequence_end`). A request
that fails leaves the sequence where it was: after a failed first request the next one starts it
again. Sequence requests are sent once, never retried: a retried request that had reached the
model would advance its state twice.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import InvalidInput
from .model import ModelInfo

SequenceId = int | str


class Step(NamedTuple):
    """The sequence flags of one request."""

    sequence_id: SequenceId
    start: bool
    end: bool

    def arguments(self) -> dict[str, Any]:
        """tritonclient's keyword arguments to `infer` (gRPC and HTTP alike)."""
        return {"sequence_id": self.sequence_id, "sequence_start": self.start, "sequence_end": self.end}


def new_sequence_id() -> int:
    """A random non-zero 63-bit id: unlikely to meet another client's sequence on the same model."""
    return secrets.randbits(63) or 1


def check_sequence_id(sequence_id: SequenceId) -> SequenceId:
    """Triton's ids are non-zero unsigned 64-bit integers or non-empty strings."""
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, (int, str)):
        raise InvalidInput(f"sequence_id must be an int or a str, got {type(sequence_id).__name__}")
    if isinstance(sequence_id, int) and not 0 < sequence_id < 2**64:
        raise InvalidInput(f"sequence_id {sequence_id} is outside 1 .. 2**64 - 1")
    if sequence_id == "":
        raise InvalidInput("sequence_id must not be empty")
    return sequence_id


@dataclass
class SequenceState:
    """One sequence of `model`: whether its first request was answered, whether it has ended."""

    model: str
    sequence_id: SequenceId
    started: bool = False
    ended: bool = False

    def step(self, info: ModelInfo, end: bool) -> Step:
        """The flags of the next request; InvalidInput for a model without sequences or an ended sequence."""
        if "sequence_batching" not in info.config:
            raise InvalidInput(
                f"model '{info.name}' keeps no state between requests (no sequence batching): use infer"
            )
        if self.ended:
            raise InvalidInput(f"sequence {self.sequence_id} of model '{self.model}' has ended")
        return Step(self.sequence_id, not self.started, end)

    def answered(self, step: Step) -> None:
        """The request with `step` succeeded: the sequence has started, and ended with an end flag."""
        self.started = True
        self.ended = step.end


def check_batch(info: ModelInfo, batch: int) -> None:
    """A sequence's request is never split: one request, one step of the state."""
    if 0 < info.max_batch_size < batch:
        raise InvalidInput(
            f"a request of a sequence is one step of its state: batch {batch} is above "
            f"max_batch_size {info.max_batch_size} of model '{info.name}' and cannot be split"
        )
