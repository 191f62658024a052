"""clients.sequence: the flags of each request of a sequence, and the checks before one is sent
(no server: what the transports would send)."""

from __future__ import annotations

import numpy as np
import pytest

from clients import InvalidInput
from clients.core import prepare
from clients.model import ModelInfo
from clients.retry import Deadline
from clients.sequence import SequenceState, Step, check_sequence_id, new_sequence_id
from clients.settings import Settings
from tests.clients._helpers import simple_info, tensor

LOCAL = Settings("127.0.0.1:8001", "grpc")


def stateful_info(max_batch_size: int = 4) -> ModelInfo:
    dims = [-1, 4] if max_batch_size else [1, 4]
    metadata = {"name": "rnn", "versions": ["1"], "inputs": [tensor("x", "FP32", dims)],
                "outputs": [tensor("y", "FP32", [*dims[:-1], 3])]}  # fmt: skip
    config = {"name": "rnn", "max_batch_size": max_batch_size, "sequence_batching": {"oldest": {}}}
    return ModelInfo.from_triton(metadata, config)


def test_the_first_request_starts_and_the_end_flag_ends() -> None:
    state, info = SequenceState("rnn", 7), stateful_info()
    first = state.step(info, end=False)
    assert first == Step(7, True, False)
    assert first.arguments() == {"sequence_id": 7, "sequence_start": True, "sequence_end": False}
    state.answered(first)
    middle = state.step(info, end=False)
    assert middle == Step(7, False, False)
    state.answered(middle)
    last = state.step(info, end=True)
    assert last == Step(7, False, True)
    state.answered(last)
    assert state.ended
    with pytest.raises(InvalidInput, match="sequence 7 of model 'rnn' has ended"):
        state.step(info, end=False)


def test_a_failed_first_request_starts_the_sequence_again() -> None:
    state, info = SequenceState("rnn", "stream-a"), stateful_info()
    assert state.step(info, end=False).start  # sent, but no answer: answered() never called
    assert state.step(info, end=False) == Step("stream-a", True, False)


def test_a_request_to_a_model_without_state_is_refused() -> None:
    with pytest.raises(InvalidInput, match="model 'simple' keeps no state"):
        SequenceState("simple", 1).step(simple_info(), end=False)


@pytest.mark.parametrize(("bad", "message"), [(0, "outside"), (2**64, "outside"), ("", "empty"),
                                              (True, "int or a str"), (1.5, "int or a str")])  # fmt: skip
def test_sequence_ids_are_what_triton_takes(bad: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_sequence_id(bad)  # type: ignore[arg-type]


def test_new_ids_are_valid_and_differ() -> None:
    ids = {new_sequence_id() for _ in range(100)}
    assert len(ids) == 100 and all(0 < i < 2**63 for i in ids)


def test_a_sequence_request_is_never_split() -> None:
    info, step = stateful_info(max_batch_size=4), Step(3, True, False)
    x = {"x": np.zeros((2, 4), np.float32)}
    call = prepare(LOCAL, info, x, None, Deadline(None), {}, step)
    assert len(call.parts) == 1 and call.sequence_arguments()["sequence_id"] == 3
    with pytest.raises(InvalidInput, match="batch 6 is above max_batch_size 4"):
        prepare(LOCAL, info, {"x": np.zeros((6, 4), np.float32)}, None, Deadline(None), {}, step)


def test_a_plain_call_carries_no_sequence_arguments() -> None:
    call = prepare(LOCAL, stateful_info(), {"x": np.zeros((6, 4), np.float32)}, None, Deadline(None), {})
    assert call.sequence_arguments() == {} and len(call.parts) == 2  # split as any batch
