"""The onnx_runner model's execute driven without a server (a stand-in for the backend's utils):
a lone request's short path, a batch concatenated and split back, when a bounded model answers in
execute and when it hands over to its line's worker, the opt-in phase timings."""

from __future__ import annotations

import json
import queue
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.builder.fixtures.onnx_runner import Response, Tensor, loaded_runner


class Sender:
    def __init__(self) -> None:
        self.sent: queue.Queue[Response] = queue.Queue()

    def send(self, response: Response, flags: int = 0) -> None:
        self.sent.put(response)


class Shape:
    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def shape(self) -> list[int]:
        return list(self.x.shape)


class Request:
    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self.sender = Sender()

    def inputs(self) -> list[Shape]:
        return [Shape(self.x)]

    def requested_output_names(self) -> list[str]:
        return ["Y"]

    def get_response_sender(self) -> Sender:
        return self.sender

    def timeout(self) -> int:
        return 0


def _utils() -> types.ModuleType:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor = Tensor  # type: ignore[attr-defined]
    utils.InferenceResponse = Response  # type: ignore[attr-defined]
    utils.TritonError = lambda message, *code: message  # type: ignore[attr-defined]
    utils.triton_string_to_numpy = lambda name: np.float32  # type: ignore[attr-defined]
    utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1  # type: ignore[attr-defined]
    utils.get_input_tensor_by_name = (  # type: ignore[attr-defined]
        lambda request, name: Tensor(name, request.x) if name == "X" else None
    )
    return utils


@pytest.fixture(scope="module")
def runner() -> Iterator[Any]:
    with loaded_runner(_utils()) as module:
        yield module


DOUBLE = [helper.make_node("Add", ["X", "X"], ["Y"])]
# Y = X / max|X| over the whole run: a row's answer moves with the rows beside it, as ONNX Runtime's
# dynamic INT8 (one scale for the run) does.
SCALED = [
    helper.make_node("Abs", ["X"], ["A"]),
    helper.make_node("ReduceMax", ["A"], ["M"], keepdims=1),
    helper.make_node("Div", ["X", "M"], ["Y"]),
]


def _model(tmp_path: Path, runner: Any, max_batch_size: int = 8, preferred: tuple[int, ...] = (),
           nodes: list[onnx.NodeProto] = DOUBLE, **params: str) -> Any:  # fmt: skip
    """Y = X * 2 (or ``nodes``) on [batch, 4], served as the local target writes it."""
    graph = helper.make_graph(
        nodes, "double",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
    )  # fmt: skip
    (tmp_path / "1").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              tmp_path / "1" / "model.onnx")  # fmt: skip
    config = {
        "max_batch_size": max_batch_size, "output": [{"name": "Y", "data_type": "TYPE_FP32"}],
        "instance_group": [{"count": 1}], "dynamic_batching": {"preferred_batch_size": list(preferred)},
        "parameters": {k: {"string_value": v} for k, v in {"intra_op_threads": "1", **params}.items()},
    }  # fmt: skip
    model = runner.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path),
                      "model_version": "1", "model_name": "double"})  # fmt: skip
    return model


def _x(rows: int, start: float = 0.0) -> np.ndarray:
    return (np.arange(rows * 4, dtype=np.float32) + start).reshape(rows, 4)


def test_a_lone_request_takes_the_short_path(runner: Any, tmp_path: Path, monkeypatch: Any) -> None:
    model = _model(tmp_path, runner)
    monkeypatch.setattr(model, "_groups", lambda feeds: pytest.fail("a lone request is not grouped"))
    (response,) = model.execute([Request(_x(3))])
    np.testing.assert_array_equal(response.output_tensors[0].array, _x(3) * 2)


def test_requests_handed_over_together_are_run_once_and_split_back(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner)
    runs = []
    run = model._run
    model._run = lambda names, feed: runs.append(feed["X"].shape) or run(names, feed)
    responses = model.execute([Request(_x(1)), Request(_x(2, 100)), Request(_x(3, 200))])
    assert runs == [(6, 4)]
    for response, x in zip(responses, [_x(1), _x(2, 100), _x(3, 200)], strict=True):
        np.testing.assert_array_equal(response.output_tensors[0].array, x * 2)


def _scaled(x: np.ndarray) -> np.ndarray:
    """Each row as the SCALED graph answers it alone."""
    return x / np.abs(x).max(axis=1, keepdims=True)


def _counting_runs(model: Any) -> list[tuple[int, ...]]:
    """The shape of X in each run of the model's session from now on."""
    runs: list[tuple[int, ...]] = []
    run = model.session.run

    def counted(names: list[str], feed: dict[str, np.ndarray]) -> Any:
        runs.append(feed["X"].shape)
        return run(names, feed)

    if model._run == run:  # the fast path calls the session's run itself
        model._run = counted
    model.session = types.SimpleNamespace(run=counted, inputs=model.inputs)
    return runs


def test_a_variant_that_runs_alone_runs_each_row_of_a_request_on_its_own(runner: Any, tmp_path: Path) -> None:
    """A request of several rows gets for each row what the row gets alone, not what the run of
    them all gives it (which moves with its mates)."""
    model = _model(tmp_path, runner, nodes=SCALED, run_alone="1")
    runs = _counting_runs(model)
    x = np.array([[1, 2, 3, 4], [10, 20, 30, 40], [0.5, -1, 0, 0]], np.float32)
    (response,) = model.execute([Request(x)])
    assert runs == [(1, 4), (1, 4), (1, 4)]
    np.testing.assert_array_equal(response.output_tensors[0].array, _scaled(x))
    assert not np.allclose(response.output_tensors[0].array, x / 40)  # what one run of all three gives


def test_requests_of_a_variant_that_runs_alone_share_no_run(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner, nodes=SCALED, run_alone="1")
    runs = _counting_runs(model)
    xs = [_x(2, 1), _x(1, 100), _x(3, -50)]
    responses = model.execute([Request(x) for x in xs])
    assert runs == [(1, 4)] * 6
    for response, x in zip(responses, xs, strict=True):
        np.testing.assert_array_equal(response.output_tensors[0].array, _scaled(x))


def test_the_line_of_a_variant_that_runs_alone_runs_each_row_on_its_own(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner, nodes=SCALED, run_alone="1", max_queue_size="16")
    runs = _counting_runs(model)
    model.line.rows_ahead = 1  # as while the worker runs a batch: the requests go to the line
    requests = [Request(_x(3, 1)), Request(_x(2, -7))]
    assert model.execute(requests) is None
    for request in requests:
        answer = request.sender.sent.get(timeout=10)
        np.testing.assert_array_equal(answer.output_tensors[0].array, _scaled(request.x))
    model.finalize()
    assert runs == [(1, 4)] * 5


def test_a_batch_invariant_variant_keeps_one_run_for_its_rows(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner, nodes=SCALED)
    runs = _counting_runs(model)
    x = _x(3, 1)
    (response,) = model.execute([Request(x)])
    assert runs == [(3, 4)]
    np.testing.assert_array_equal(response.output_tensors[0].array, x / np.abs(x).max())


def test_a_bad_lone_request_fails_alone(runner: Any, tmp_path: Path) -> None:
    (response,) = _model(tmp_path, runner).execute([Request(np.zeros((1, 5), np.float32))])
    assert response.error and "onnxruntime" in response.error


def _answered_by_the_worker(model: Any, requests: list[Request]) -> bool:
    """Executes the requests; whether the answers came through the senders (the line's worker),
    each checked, rather than from execute."""
    returned = model.execute(requests)
    try:
        answers = returned or [r.sender.sent.get(timeout=10) for r in requests]
        for answer, request in zip(answers, requests, strict=True):
            np.testing.assert_array_equal(answer.output_tensors[0].array, request.x * 2)
        return returned is None
    finally:
        model.finalize()


def test_a_bounded_model_answers_in_execute_what_emptied_tritons_queue(runner: Any, tmp_path: Path) -> None:
    """Room left for one more: Triton had no more, and keeps forming batches while this one runs."""
    model = _model(tmp_path, runner, max_queue_size="16")
    assert not _answered_by_the_worker(model, [Request(_x(2)), Request(_x(1, 10)), Request(_x(2, 20))])


def test_a_full_batch_goes_to_the_line_where_the_rest_is_counted(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner, max_queue_size="16")
    assert _answered_by_the_worker(model, [Request(_x(4)), Request(_x(3, 10))])  # no room for 4 more


def test_a_preferred_size_goes_to_the_line(runner: Any, tmp_path: Path) -> None:
    """Triton stops at a preferred size with more waiting."""
    model = _model(tmp_path, runner, preferred=(2,), max_queue_size="16")
    assert _answered_by_the_worker(model, [Request(_x(1)), Request(_x(1, 10))])


def test_behind_a_busy_line_requests_wait_their_turn(runner: Any, tmp_path: Path) -> None:
    model = _model(tmp_path, runner, max_queue_size="16")
    model.line.rows_ahead = 1  # as while the worker runs a batch
    assert _answered_by_the_worker(model, [Request(_x(1))])


def test_without_batching_a_bounded_model_always_uses_its_line(runner: Any, tmp_path: Path) -> None:
    """One request per execute whatever Triton holds: execute cannot tell an empty queue."""
    model = _model(tmp_path, runner, max_batch_size=0, max_queue_size="16")
    assert _answered_by_the_worker(model, [Request(_x(1))])


def test_timings_are_off_unless_asked(runner: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv(runner.TIMINGS_ENV, raising=False)
    model = _model(tmp_path, runner)
    assert "execute" not in vars(model) and "_feed" not in vars(model)


def test_timings_record_each_phase_per_execute(runner: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv(runner.TIMINGS_ENV, str(tmp_path / "timings"))
    model = _model(tmp_path, runner)
    model.execute([Request(_x(1))])
    model.execute([Request(_x(1)), Request(_x(2))])
    model.finalize()
    (log,) = (tmp_path / "timings").glob("double.*.jsonl")
    lone, pair = (json.loads(line) for line in log.read_text().splitlines())
    assert lone["requests"] == 1 and {"feed", "run", "response"} <= set(lone) and "concat" not in lone
    assert pair["requests"] == 2 and {"feed", "concat", "run", "split", "response"} <= set(pair)
    assert all(pair[k] <= pair["execute"] for k in ("feed", "concat", "run", "split", "response"))
