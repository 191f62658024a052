"""The onnx_sequence model (the local target's stateful runner) driven without a server, with a
stand-in for the backend's utils: states per correlation id, reset at a start, dropped at an end or
when idle, and the requests of several sequences run as one batch."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.builder.fixtures.onnx_runner import Response, Tensor, loaded_runner
from tests.builder.fixtures.recurrent import CHUNKS, chunks, onnx_loop, rnn_model, vad_model, write_project

START, END = 1, 2


class Request:
    """A request as the sequence batcher hands it over: inputs, correlation id and flags."""

    def __init__(self, corrid: int, flags: int, **inputs: np.ndarray) -> None:
        self.corrid, self.flag_bits, self.arrays = corrid, flags, inputs

    def correlation_id(self) -> int:
        return self.corrid

    def flags(self) -> int:
        return self.flag_bits


def _utils() -> types.ModuleType:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor = Tensor  # type: ignore[attr-defined]
    utils.InferenceResponse = Response  # type: ignore[attr-defined]
    utils.TritonError = lambda message, *code: message  # type: ignore[attr-defined]
    utils.triton_string_to_numpy = lambda name: np.float32  # type: ignore[attr-defined]
    utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = START  # type: ignore[attr-defined]
    utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = END  # type: ignore[attr-defined]
    utils.get_input_tensor_by_name = (  # type: ignore[attr-defined]
        lambda request, name: Tensor(name, request.arrays[name]) if name in request.arrays else None
    )
    return utils


@pytest.fixture(scope="module")
def module() -> Iterator[Any]:
    with loaded_runner(_utils(), "onnx_sequence") as loaded:
        yield loaded


def _model(module: Any, folder: Path, name: str) -> Any:
    """The model as the local target configures it (see test_configs_sequence)."""
    graph, batch, state = {
        "vad": (vad_model(), 0, {"input": "state", "output": "stateN", "dtype": "FP32", "dims": [2, 1, 8]}),
        "rnn": (rnn_model(), 4, {"input": "h", "output": "hN", "dtype": "FP32", "dims": [8]}),
    }[name]
    (folder / "1").mkdir(parents=True)
    onnx.save(graph, folder / "1" / "model.onnx")
    config = {
        "max_batch_size": batch, "output": [{"name": "y", "data_type": "TYPE_FP32"}],
        "sequence_batching": {"max_sequence_idle_microseconds": 1_000_000},
        "parameters": {"sequence_state": {"string_value": json.dumps([state])}},
    }  # fmt: skip
    model = module.TritonPythonModel()
    model.initialize(
        {"model_config": json.dumps(config), "model_repository": str(folder), "model_version": "1"}
    )
    return model


def _rnn(corrid: int, flags: int, x: np.ndarray) -> Request:
    """A request to rnn, with the START control Triton adds to it (the model reads it)."""
    return Request(corrid, flags, x=x, START=np.array([[flags & START]], np.int32))


def _flags(step: int, count: int) -> int:
    return (START if step == 0 else 0) | (END if step == count - 1 else 0)


def _y(response: Response) -> np.ndarray:
    assert response.error is None, response.error
    [tensor] = response.output_tensors
    assert tensor.name == "y"  # the state output stays inside
    return tensor.array


def test_two_sequences_in_one_batch_each_keep_their_state(module: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_project(project)
    model = _model(module, tmp_path / "rnn", "rnn")
    model.session = Counted(model.session)
    a, b = chunks(1), chunks(2)
    want_a, want_b = onnx_loop("rnn", project, a), onnx_loop("rnn", project, b)
    for i in range(CHUNKS):
        flags = _flags(i, CHUNKS)
        got_a, got_b = model.execute([_rnn(1, flags, a[i]), _rnn(2, flags, b[i])])
        np.testing.assert_allclose(_y(got_a), want_a[i], atol=1e-6)
        np.testing.assert_allclose(_y(got_b), want_b[i], atol=1e-6)
    assert not model.sequences.values  # both ended: nothing kept
    assert model.session.runs == CHUNKS  # one run per pair of requests


class Counted:
    """An ONNX Runtime session that counts its runs."""

    def __init__(self, session: Any) -> None:
        self.session, self.runs = session, 0

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> Any:
        self.runs += 1
        return self.session.run(names, feed)


def test_start_resets_and_end_drops_the_state(module: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_project(project)
    model = _model(module, tmp_path / "vad", "vad")
    stream = chunks(3, 3)
    want = onnx_loop("vad", project, stream)
    for _ in range(2):  # a second sequence with the same id starts from zeros again
        got = [_y(model.execute([Request(9, START if i == 0 else 0, x=c)])[0]) for i, c in enumerate(stream)]
        np.testing.assert_allclose(np.stack(got), np.stack(want), atol=1e-6)
    assert set(model.sequences.values) == {9}
    model.execute([Request(9, END, x=stream[0])])
    assert not model.sequences.values


def test_idle_sequences_are_forgotten(module: Any, tmp_path: Path) -> None:
    model = _model(module, tmp_path / "vad", "vad")
    model.execute([Request(5, START, x=chunks(4, 1)[0])])
    used = model.sequences.used[5]
    model.sequences.expire(now=used + 0.5)
    assert 5 in model.sequences.values  # within max_sequence_idle_microseconds (1 s)
    model.sequences.expire(now=used + 1.5)
    assert 5 not in model.sequences.values


def test_a_bad_request_fails_alone(module: Any, tmp_path: Path) -> None:
    model = _model(module, tmp_path / "rnn", "rnn")
    good, bad = chunks(5, 1)[0], np.zeros((1, 5), np.float32)
    first, second = model.execute([_rnn(1, START, good), _rnn(2, START, bad)])
    assert first.error is None and isinstance(second.error, str) and "onnxruntime" in second.error
    assert set(model.sequences.values) == {1}
