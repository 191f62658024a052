"""The ``local`` target's core model: an ONNX graph on a CPU runtime (ONNX Runtime or OpenVINO,
``runtimes/``, the build's own modules) inside Triton's Python backend.

Triton's dynamic batcher hands ``execute`` a list of requests. They are run
as few ONNX Runtime calls as possible: requests whose non-batch shapes agree
are concatenated along the batch axis, run once, and the result is split
back into per-request views. A failing group is retried request by request
so that one bad request fails alone. A variant whose answer for a row moves
with the other rows of its run (``run_alone``: the verification measured it)
runs every row on its own instead: each request alone, its rows one by one.

With a bounded queue (parameters ``max_queue_size`` / ``queue_timeout_us``, written on the
``local`` target in place of Triton's queue policy) the model keeps a line of its own, where the
bound can be counted: requests beyond ``max_queue_size`` waiting, or waiting longer than the
timeout, get Triton's own UNAVAILABLE error and messages. While the line is empty and Triton's
batch is all Triton had queued (smaller than a full batch), ``execute`` answers it at once, as
without a bound: Triton keeps forming batches while it runs, which a ~1 ms model needs (handing
each request to the worker cost light_cnn its batching, docs/bench.md, light_cnn). Otherwise
``execute`` only queues the requests and returns, so Triton hands over the rest of its queue at
once, and a worker thread runs the line in batches and answers through each request's response
sender. (Triton's own queue policy is not an option there: tritonserver 2.51's batcher then stalls
up to 500 ms for a new request, bench/queue_stall.py.)

The worker's responses carry only the outputs each request asked for. The 2.51 stub's
``InferenceResponseSender.send`` releases the GIL and then drops the output tensors the request
did not ask for; a tensor dropped there frees its numpy array without the GIL, and when that array
is the last view of an ONNX Runtime output, the output's capsule destructor calls into Python with
no thread state and the stub segfaults (``_PyErr_Fetch``, address 0x60). The synchronous path is
safe: there the stub drops them in ``execute``'s thread, holding the GIL. The tensors a response
carries are also kept referenced until its send has returned, so that nothing the stub does inside
``send`` can free a Python object.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from numpy.typing import NDArray

from .contract import ONNX_FILE, ONNX_FILE_KEY, RUN_ALONE
from .runtimes import DEFAULT, RUNTIME, instances, open_served
from .utils.line import BoundedLine, Pending
from .utils.timings import TIMINGS_ENV, Timed, Timings


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"]
        path = folder / params.get(ONNX_FILE_KEY, ONNX_FILE)
        self.session = open_served(path, params, config)
        self.runtime = params.get(RUNTIME, DEFAULT)
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = self.session.inputs
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config["output"]
        ]
        self.output_names = [name for name, _ in self.outputs]
        self.line = BoundedLine.from_params(params, instances(config))
        # A variant whose answer for a row depends on the other rows of its run (ONNX Runtime's
        # dynamic INT8: one scale for all of them) runs each row on its own: no two requests share a
        # run (the line takes one at a time), and a request's rows are run one by one.
        self.alone = params.get(RUN_ALONE, "") == "1"
        self._run = self._run_rows if self.alone and self.batched else self.session.run
        self.batch_rows = max(1, int(config.get("max_batch_size", 0)))
        self.max_rows = 1 if self.alone else self.batch_rows
        batcher = config.get("dynamic_batching") or {}
        self.preferred = frozenset(int(n) for n in batcher.get("preferred_batch_size", []))
        timings = os.environ.get(TIMINGS_ENV, "")
        if timings:
            Timings(Path(timings) / f"{args['model_name']}.{os.getpid()}.jsonl").attach(self)
        if self.line is not None:
            self.worker = threading.Thread(target=self._serve_line, name="onnx_runner", daemon=True)
            self.worker.start()

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if self.line is None:
            return self._answer_now(requests)
        rows = [_rows(r) for r in requests]
        if self.line.idle() and self._all_triton_had(rows):
            start = time.perf_counter()
            responses = self._answer_now(requests)
            self.line.paced(sum(rows), time.perf_counter() - start)
            return responses
        # Inputs are copied, the sender and the requested output names taken now: the worker
        # keeps no request object past execute (the stub frees them when execute returns).
        captured = [self._capture(r, n) for r, n in zip(requests, rows, strict=True)]
        for pending, refusal in self.line.offer(captured):
            _send(pending, _rejected(refusal))
        return None

    def _all_triton_had(self, rows: list[int]) -> bool:
        """Whether Triton's batch left its queue empty. Triton forms the largest batch it can, so a
        batch with room for one more of its requests took all there was, unless it is one of the
        preferred sizes Triton stops at. A model without batching gets one request at a time and
        cannot tell."""
        if not self.batched:
            return False
        total = sum(rows)
        return total not in self.preferred and total + max(rows) <= self.batch_rows

    def _answer_now(self, requests: list[Any]) -> list[Any]:
        if len(requests) == 1:  # nothing to group or split: straight to the run
            return [self._answer_one(requests[0])]
        return self._answer(requests)

    def _capture(self, request: Any, rows: int) -> Pending:
        try:
            feed, error = {k: np.array(v, copy=True) for k, v in self._feed(request).items()}, None
        except Exception as exc:
            feed, error = {}, f"bad input: {exc}"
        wanted = frozenset(request.requested_output_names())
        return Pending(request.get_response_sender(), feed, error, rows, request.timeout(), wanted)

    def _serve_line(self) -> None:
        assert self.line is not None
        while (batch := self.line.take(self.max_rows)) is not None:
            fresh = []
            for request, late in batch:
                if late:
                    _send(request, _rejected("Request timeout expired"))
                else:
                    fresh.append(request)
            start = time.perf_counter()
            try:
                results = self._run_pending(fresh)
            except Exception as exc:  # never leave a request unanswered
                results = [f"onnx_runner: {exc}" for _ in fresh]
            self.line.done(sum(p.rows for p in fresh), time.perf_counter() - start)
            for request, result in zip(fresh, results, strict=True):
                self._reply(request, result)

    def _reply(self, pending: Pending, result: Result) -> None:
        """Send one request its outputs (only those it asked for) or its error."""
        if isinstance(result, str):
            _send(pending, _error(result))
            return
        tensors = self._tensors(result, pending.wanted)
        _send(pending, pb_utils.InferenceResponse(output_tensors=tensors))
        del tensors  # dropped here, holding the GIL, not inside send (see the module's docstring)

    def _run_pending(self, pending: list[Pending]) -> list[Result]:
        feeds = {i: p.feed for i, p in enumerate(pending) if p.error is None}
        errors = {i: p.error for i, p in enumerate(pending) if p.error is not None}
        return self._run_feeds(feeds, errors)

    def _answer(self, requests: list[Any]) -> list[Any]:
        feeds: dict[int, dict[str, NDArray[Any]]] = {}
        errors: dict[int, str] = {}
        for i, request in enumerate(requests):
            try:
                feeds[i] = self._feed(request)
            except Exception as exc:
                errors[i] = f"bad input: {exc}"
        results = self._run_feeds(feeds, errors)
        return [_error(r) if isinstance(r, str) else self._response(r) for r in results]

    def _run_feeds(self, feeds: dict[int, dict[str, NDArray[Any]]], errors: dict[int, str]) -> list[Result]:
        """Each request's result, by index: its error if its inputs failed, else its outputs from
        as few runs as the groups allow."""
        results: list[Result] = [errors.get(i, "") for i in range(len(feeds) + len(errors))]
        for group in self._groups(feeds):
            self._run_group(group, feeds, results)
        return results

    def _answer_one(self, request: Any) -> Any:
        try:
            feed = self._feed(request)
        except Exception as exc:
            return _error(f"bad input: {exc}")
        result = self._run_one(feed)
        return _error(result) if isinstance(result, str) else self._response(result)

    def _feed(self, request: Any) -> dict[str, NDArray[Any]]:
        feed = {}
        for name, dtype in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                continue  # optional input; ORT reports it if the graph needs it
            array = tensor.as_numpy()
            feed[name] = array if dtype is None or array.dtype == dtype else array.astype(dtype)
        return feed

    def _groups(self, feeds: dict[int, dict[str, NDArray[Any]]]) -> list[list[int]]:
        """Indices of requests that can share one run: same inputs, same non-batch shapes."""
        if not self.batched or self.alone:
            return [[i] for i in feeds]
        groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
        for i, feed in feeds.items():
            key = tuple((name, a.shape[1:]) for name, a in feed.items())
            groups.setdefault(key, []).append(i)
        return list(groups.values())

    def _run_group(
        self, group: list[int], feeds: dict[int, dict[str, NDArray[Any]]], results: list[Result]
    ) -> None:
        """Each request's output arrays (config order), or its error message."""
        if len(group) == 1:
            results[group[0]] = self._run_one(feeds[group[0]])
            return
        members = [feeds[i] for i in group]
        sizes = [next(iter(f.values())).shape[0] for f in members]
        batch = self._concat(members)
        try:
            outputs = self._run(self.output_names, batch)
        except Exception:
            for i in group:  # find the culprit: the others still get their answers
                results[i] = self._run_one(feeds[i])
            return
        per_output = self._split(outputs, sizes)
        for k, i in enumerate(group):
            results[i] = [parts[k] for parts in per_output]

    @staticmethod
    def _concat(members: list[dict[str, NDArray[Any]]]) -> dict[str, NDArray[Any]]:
        return {name: np.concatenate([f[name] for f in members]) for name in members[0]}

    @staticmethod
    def _split(outputs: list[NDArray[Any]], sizes: list[int]) -> list[list[NDArray[Any]]]:
        bounds = np.cumsum(sizes)[:-1]
        return [np.split(r, bounds) for r in outputs]

    def _run_rows(self, names: list[str], feed: dict[str, NDArray[Any]]) -> list[NDArray[Any]]:
        """Each row of ``feed`` run on its own and the outputs joined back in order: what a row gets
        is what it gets alone, whichever rows share its request (a variant that runs alone)."""
        rows = next(iter(feed.values())).shape[0] if feed else 1
        if rows <= 1:
            return list(self.session.run(names, feed))
        runs = [self.session.run(names, {k: v[i : i + 1] for k, v in feed.items()}) for i in range(rows)]
        return [np.concatenate(parts) for parts in zip(*runs, strict=True)]

    def _run_one(self, feed: dict[str, NDArray[Any]]) -> Result:
        try:
            return list(self._run(self.output_names, feed))
        except Exception as exc:
            return f"{self.runtime}: {exc}"

    def _response(self, arrays: list[NDArray[Any]]) -> Any:
        return pb_utils.InferenceResponse(output_tensors=self._tensors(arrays))

    def _tensors(self, arrays: list[NDArray[Any]], wanted: frozenset[str] | None = None) -> list[Any]:
        """The outputs as Triton tensors; with ``wanted``, only those (a request's requested outputs)."""
        return [
            pb_utils.Tensor(name, np.ascontiguousarray(a, dtype=dtype))
            for (name, dtype), a in zip(self.outputs, arrays, strict=True)
            if wanted is None or name in wanted
        ]

    def finalize(self) -> None:
        if isinstance(self.execute, Timed):
            self.execute.timings.flush()
        if self.line is not None:
            self.line.close()  # the worker answers what is queued, then stops
            self.worker.join(timeout=30)
        self.session = None  # type: ignore[assignment]


def _rows(request: Any) -> int:
    """The request's batch size: the first input's leading dimension."""
    inputs = request.inputs()
    return int(inputs[0].shape()[0]) if inputs and inputs[0].shape() else 1


# One request's answer from the runtime: its output arrays in config order, or an error message.
Result = list[NDArray[Any]] | str


def _send(pending: Pending, response: Any) -> None:
    """The request's one and final response; a sender that fails (its client gone) must not stop
    the worker that answers everyone else."""
    try:
        pending.sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    except Exception as exc:
        pb_utils.Logger.log_warn(f"onnx_runner: could not send a response: {exc}")


def _rejected(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.UNAVAILABLE))


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
