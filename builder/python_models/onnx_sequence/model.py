"""The ``local`` target's core model for a stateful model: ONNX Runtime (opened as ``runtimes/``
opens it for every model), states kept per sequence.

tritonserver 2.51's Python backend has no implicit state (its backend library never calls
``TRITONBACKEND_StateUpdate``), so this model keeps the states itself, as Triton's implicit state
would: per correlation id, zeros at a sequence's start, each run's state outputs fed to the same
sequence's next run, dropped at its end or after ``max_sequence_idle_microseconds`` without a
request. Triton's sequence batcher routes every request of a sequence to the same instance, so the
states of an instance's sequences live here. Clients never see the state tensors: the config lists
only the model's other inputs and outputs; the states are in the ``sequence_state`` parameter.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from numpy.typing import NDArray

from .contract import ONNX_FILE, ONNX_FILE_KEY, SEQUENCE_STATE, StateEntry
from .runtimes import open_served

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip
START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
END = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


@dataclass(frozen=True)
class State:
    input: str
    output: str
    dtype: Any
    dims: list[int]

    def initial(self, batch: int | None) -> NDArray[Any]:
        """Zeros; ``batch`` rows in front where the model batches."""
        return np.zeros(([batch] if batch is not None else []) + self.dims, dtype=self.dtype)


@dataclass(frozen=True)
class Step:
    """One request's run: its sequence, whether it ends it, its inputs with the sequence's states."""

    corrid: Any
    end: bool
    feed: dict[str, NDArray[Any]]

    @property
    def rows(self) -> int:
        return int(next(iter(self.feed.values())).shape[0])


@dataclass
class Sequences:
    """The states of the live sequences, by correlation id, forgotten after ``idle_s`` unused."""

    idle_s: float
    values: dict[Any, dict[str, NDArray[Any]]] = field(default_factory=dict)
    used: dict[Any, float] = field(default_factory=dict)

    def take(self, corrid: Any, start: bool) -> dict[str, NDArray[Any]] | None:
        """The sequence's states (None at its start or when unknown: the initial ones)."""
        if start:
            self.drop(corrid)
        return self.values.get(corrid)

    def keep(self, corrid: Any, states: dict[str, NDArray[Any]], end: bool, now: float | None = None) -> None:
        if end:
            self.drop(corrid)
        else:
            self.values[corrid], self.used[corrid] = states, time.monotonic() if now is None else now

    def drop(self, corrid: Any) -> None:
        self.values.pop(corrid, None)
        self.used.pop(corrid, None)

    def expire(self, now: float | None = None) -> None:
        """Forget sequences Triton has dropped for idleness (it tells the model nothing)."""
        cutoff = (time.monotonic() if now is None else now) - self.idle_s
        for corrid in [c for c, t in self.used.items() if t < cutoff]:
            self.drop(corrid)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"]
        self.session = open_served(folder / params.get(ONNX_FILE_KEY, ONNX_FILE), params, config)
        entries: list[StateEntry] = json.loads(params[SEQUENCE_STATE])
        self.states = [State(s["input"], s["output"], NUMPY[s["dtype"]], list(s["dims"])) for s in entries]
        hidden = {s.input for s in self.states}
        self.inputs = [name for name, _ in self.session.inputs if name not in hidden]
        to_numpy = pb_utils.triton_string_to_numpy
        self.outputs = [(o["name"], to_numpy(o["data_type"])) for o in config["output"]]
        self.run_names = [name for name, _ in self.outputs] + [s.output for s in self.states]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        idle_us = int(config.get("sequence_batching", {}).get("max_sequence_idle_microseconds", 1_000_000))
        self.sequences = Sequences(idle_s=idle_us / 1e6)

    def execute(self, requests: list[Any]) -> list[Any]:
        self.sequences.expire()
        steps = [self._step(r) for r in requests]
        runnable = [s for s in steps if isinstance(s, Step)]
        results = dict(zip(map(id, runnable), self._run(runnable), strict=True))
        return [self._finish(s, results[id(s)]) if isinstance(s, Step) else s for s in steps]

    def _step(self, request: Any) -> Step | Any:
        """The request's run (its inputs with its sequence's states), or its error response."""
        corrid, flags = request.correlation_id(), request.flags()
        try:
            feed = self._feed(request)
        except Exception as exc:
            return _error(f"bad input: {exc}")
        states = self.sequences.take(corrid, start=bool(flags & START))
        if states is None:
            states = {s.input: s.initial(self._rows(feed)) for s in self.states}
        return Step(corrid, bool(flags & END), feed | states)

    def _run(self, steps: list[Step]) -> list[list[NDArray[Any]] | str]:
        """Each step's outputs (config order, then the state outputs) or its error. Where the model
        batches, the steps of several sequences (Triton's oldest strategy hands them over together)
        whose shapes agree run as one batch, states stacked on their batch axis like the inputs."""
        if not self.batched or len(steps) == 1:
            return [self._run_one(s) for s in steps]
        results: dict[int, list[NDArray[Any]] | str] = {}
        groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
        for i, step in enumerate(steps):
            groups.setdefault(tuple((k, v.shape[1:]) for k, v in step.feed.items()), []).append(i)
        for members in groups.values():
            results.update(zip(members, self._run_group([steps[i] for i in members]), strict=True))
        return [results[i] for i in range(len(steps))]

    def _run_group(self, steps: list[Step]) -> list[list[NDArray[Any]] | str]:
        if len(steps) == 1:
            return [self._run_one(steps[0])]
        feed = {name: np.concatenate([s.feed[name] for s in steps]) for name in steps[0].feed}
        try:
            got = self.session.run(self.run_names, feed)
        except Exception:  # one bad request fails alone
            return [self._run_one(s) for s in steps]
        bounds = np.cumsum([s.rows for s in steps])[:-1]
        parts = [np.split(a, bounds) for a in got]
        return [[p[k] for p in parts] for k in range(len(steps))]

    def _run_one(self, step: Step) -> list[NDArray[Any]] | str:
        try:
            return list(self.session.run(self.run_names, step.feed))
        except Exception as exc:
            return f"onnxruntime: {exc}"

    def _finish(self, step: Step, result: list[NDArray[Any]] | str) -> Any:
        """Keep the sequence's new states (or drop them at its end) and answer the request."""
        if isinstance(result, str):
            return _error(result)
        count = len(self.outputs)
        updated = {s.input: np.array(v) for s, v in zip(self.states, result[count:], strict=True)}
        self.sequences.keep(step.corrid, updated, end=step.end)
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(a, dtype=dtype))
            for (name, dtype), a in zip(self.outputs, result[:count], strict=True)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _feed(self, request: Any) -> dict[str, NDArray[Any]]:
        feed = {}
        for name in self.inputs:  # the model's inputs and the controls Triton adds
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                feed[name] = tensor.as_numpy()
        return feed

    def _rows(self, feed: dict[str, NDArray[Any]]) -> int | None:
        if not self.batched:
            return None
        return int(next(iter(feed.values())).shape[0]) if feed else 1

    def finalize(self) -> None:
        self.session = None  # type: ignore[assignment]


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
