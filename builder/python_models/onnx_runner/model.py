"""The ``local`` target's core model: ONNX Runtime inside Triton's Python backend.

Triton's dynamic batcher hands ``execute`` a list of requests. They are run
as few ONNX Runtime calls as possible: requests whose non-batch shapes agree
are concatenated along the batch axis, run once, and the result is split
back into per-request views. A failing group is retried request by request
so that one bad request fails alone.

With a bounded queue (parameters ``max_queue_size`` / ``queue_timeout_us``, written on the
``local`` target in place of Triton's queue policy) the model keeps a line of its own, where the
bound can be counted: requests beyond ``max_queue_size`` waiting, or waiting longer than the
timeout, get Triton's own UNAVAILABLE error and messages. While the line is empty and Triton's
batch is all Triton had queued (smaller than a full batch), ``execute`` answers it at once, as
without a bound: Triton keeps forming batches while it runs, which a ~1 ms model needs (handing
each request to the worker cost light_cnn its batching, bench/runner_overhead.py). Otherwise
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
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from numpy.typing import NDArray

from .contract import (
    ALLOW_SPINNING,
    ALLOW_TIMEOUT_OVERRIDE,
    INTRA_OP_THREADS,
    MAX_QUEUE_SIZE,
    ONNX_FILE,
    ONNX_FILE_KEY,
    QUEUE_TIMEOUT_US,
    STOP_SPINNING,
)

# ONNX Runtime's type strings for the inputs it may be given.
ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def _threads(params: dict[str, str], config: dict[str, Any]) -> int:
    """Intra-op threads: the spec's number, else the cores shared out among the instances, so
    that instances x threads never oversubscribes the machine."""
    given = int(params.get(INTRA_OP_THREADS, "0") or 0)
    if given > 0:
        return given
    return max(1, (os.cpu_count() or 1) // _instances(config))


def session_options(params: dict[str, str], config: dict[str, Any]) -> ort.SessionOptions:
    """ONNX Runtime's options for the config: all graph optimisations, one run at a time, the
    intra-op threads and whether their idle workers spin (``stop_spinning``: only while a run is
    going on, ``session.force_spinning_stop``; bench/runner_overhead.py measures it)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = _threads(params, config)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not _spinning(params, config):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif params.get(STOP_SPINNING, "").lower() in ("1", "true"):
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def _spinning(params: dict[str, str], config: dict[str, Any]) -> bool:
    """Whether ORT's idle intra-op workers spin waiting for work: as the config's ``allow_spinning``
    parameter says, else only where the instances' threads leave a core of this machine free
    (``spare_core``). Which wins depends on the machine (bench/runner_overhead.py): a worker
    spinning on the core that tritonserver's threads, the stub and the clients need delays every
    hand-off of a request; with other work on two cores, workers that sleep served light_cnn 1.9x
    faster at concurrency 1, and on an idle machine spinning was 6-9 % faster."""
    given = params.get(ALLOW_SPINNING, "").lower()
    if given in ("0", "1", "false", "true"):
        return given in ("1", "true")
    return spare_core(_instances(config), _threads(params, config), os.cpu_count() or 1)


def spare_core(instances: int, threads: int, cores: int) -> bool:
    """Whether ``instances`` ONNX Runtime sessions of ``threads`` intra-op threads each leave at
    least one of ``cores`` to the server and its clients."""
    return instances * threads < cores


def _instances(config: dict[str, Any]) -> int:
    return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"]
        path = folder / params.get(ONNX_FILE_KEY, ONNX_FILE)
        options = session_options(params, config)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._run = self.session.run
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [(i.name, ORT_TYPES.get(i.type)) for i in self.session.get_inputs()]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config["output"]
        ]
        self.output_names = [name for name, _ in self.outputs]
        self.line = BoundedLine.from_params(params, _instances(config))
        self.max_rows = max(1, int(config.get("max_batch_size", 0)))
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
        return total not in self.preferred and total + max(rows) <= self.max_rows

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
        if not self.batched:
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

    def _run_one(self, feed: dict[str, NDArray[Any]]) -> Result:
        try:
            return list(self._run(self.output_names, feed))
        except Exception as exc:
            return f"onnxruntime: {exc}"

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
        self.session = None


TIMINGS_ENV = "TRITONFORGE_RUNNER_TIMINGS"
PHASES = ("_feed", "_concat", "_run", "_split", "_response")


class Timings:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.current: dict[str, int] = {}
        self.lines: list[str] = []
        self.flushed = time.monotonic()

    def attach(self, model: TritonPythonModel) -> None:
        """Wrap the model's phases (instance attributes shadow the methods) and its execute."""
        for phase in PHASES:
            setattr(model, phase, self._timed(phase.lstrip("_"), getattr(model, phase)))
        model.execute = Timed(self, model.execute)  # type: ignore[method-assign]

    def _timed(self, phase: str, fn: Any) -> Any:
        def timed(*args: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:
                self.current[phase] = self.current.get(phase, 0) + time.perf_counter_ns() - start

        return timed

    def record(self, requests: int, ns: int) -> None:
        self.lines.append(json.dumps({"requests": requests, "execute": ns, **self.current}))
        self.current = {}
        if time.monotonic() - self.flushed > 0.5:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            with self.path.open("a") as out:
                out.write("\n".join(self.lines) + "\n")
            self.lines = []
        self.flushed = time.monotonic()


class Timed:
    def __init__(self, timings: Timings, execute: Any) -> None:
        self.timings, self.inner = timings, execute

    def __call__(self, requests: list[Any]) -> Any:
        start = time.perf_counter_ns()
        out = self.inner(requests)
        self.timings.record(len(requests), time.perf_counter_ns() - start)
        return out


# The share of a timeout the line plans to use: the rest is for what it cannot see (the request's
# way to the model and back, the pace changing on a shared machine).
HEADROOM = 0.5


class BoundedLine:
    """Requests waiting for the worker, oldest first: at most ``limit`` (0: any number). With a
    timeout, a request is refused at arrival when the worker's measured pace says the line ahead
    of it takes longer (Triton refuses only on queue time; here the timeout bounds the whole
    answer, which is what a caller waits for), and when its batch is formed if it waited past
    its deadline."""

    def __init__(self, limit: int, timeout_us: int, allow_override: bool) -> None:
        self.limit = limit
        self.timeout_us = timeout_us
        self.allow_override = allow_override
        self.waiting: deque[tuple[Any, int, int]] = deque()  # (request, batch rows, deadline ns)
        self.ready = threading.Condition()
        self.closed = False
        self.rows_ahead = 0  # rows waiting plus rows running
        self.ns_per_row = 0.0  # the worker's measured pace (0 until the second batch)
        self.batches = 0

    @staticmethod
    def from_params(params: dict[str, str], instances: int) -> BoundedLine | None:
        """The spec's bound is the model's: each instance (its own process) holds its share."""
        limit = -(-int(params.get(MAX_QUEUE_SIZE, "0") or 0) // instances)
        timeout_us = int(params.get(QUEUE_TIMEOUT_US, "0") or 0)
        if limit <= 0 and timeout_us <= 0:
            return None
        override = params.get(ALLOW_TIMEOUT_OVERRIDE, "true").lower() == "true"
        return BoundedLine(limit, timeout_us, override)

    def offer(self, requests: list[Any]) -> list[tuple[Any, str]]:
        """Queue the requests Triton handed over together (they stay together, as Triton's own
        warm-up batches must); the refused ones with their messages."""
        refused = []
        with self.ready:
            for request in requests:
                refusal = self._admit(request)
                if refusal is not None:
                    refused.append((request, refusal))
            self.ready.notify()
        return refused

    def _admit(self, request: Any) -> str | None:
        timeout_us = self.timeout_us
        if self.allow_override and 0 < request.timeout_us < timeout_us:  # as Triton overrides
            timeout_us = request.timeout_us
        now, rows = time.monotonic_ns(), request.rows
        deadline = now + int(timeout_us * 1000 * HEADROOM) if timeout_us else 0
        if self.closed:
            return "Server is stopping: the model accepts no new requests"
        if self.limit and len(self.waiting) >= self.limit:
            return f"Exceeds maximum queue size ({self.limit} requests waiting)"
        ahead = self.rows_ahead
        if deadline and ahead and now + (ahead + rows) * self.ns_per_row > deadline:  # a lone one runs
            return f"Request timeout expired: the {ahead} rows ahead would take longer"
        self.waiting.append((request, rows, deadline))
        self.rows_ahead += rows
        return None

    def take(self, max_rows: int) -> list[tuple[Any, bool]] | None:
        """The oldest requests that fit in ``max_rows`` batch rows, each with whether its deadline
        has passed; blocks while none wait; None once closed and empty."""
        with self.ready:
            while not self.waiting:
                if self.closed:
                    return None
                self.ready.wait()
            now, rows = time.monotonic_ns(), 0
            batch: list[tuple[Any, bool]] = []
            max_rows = self._rows_in_time(max_rows)
            while self.waiting:
                request, size, deadline = self.waiting[0]
                late = bool(deadline) and now > deadline
                if not late and batch and rows + size > max_rows:
                    break
                self.waiting.popleft()
                batch.append((request, late))
                rows += 0 if late else size
                self.rows_ahead -= size if late else 0
        return batch

    def _rows_in_time(self, max_rows: int) -> int:
        """On a slow pace, smaller batches: one batch runs in at most a quarter of the timeout."""
        if not (self.timeout_us and self.ns_per_row):
            return max_rows
        return max(1, min(max_rows, int(self.timeout_us * 1000 * HEADROOM / 4 / self.ns_per_row)))

    def done(self, rows: int, seconds: float) -> None:
        """The worker ran a batch of ``rows`` in ``seconds``: they are no longer ahead."""
        with self.ready:
            self.rows_ahead = max(0, self.rows_ahead - rows)
            self._pace(rows, seconds)

    def paced(self, rows: int, seconds: float) -> None:
        """A batch answered outside the line took ``seconds``: the pace learns from it too."""
        with self.ready:
            self._pace(rows, seconds)

    def _pace(self, rows: int, seconds: float) -> None:
        """The pace per row, a moving average over batches after the slow cold first one."""
        self.batches += 1
        if rows and self.batches > 1:
            pace = seconds * 1e9 / rows
            self.ns_per_row = pace if not self.ns_per_row else 0.7 * self.ns_per_row + 0.3 * pace

    def idle(self) -> bool:
        """Nothing waiting and nothing running (``execute`` is the only one adding to the line,
        so this stays true while it answers a batch itself)."""
        with self.ready:
            return self.rows_ahead == 0 and not self.closed

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()


def _rows(request: Any) -> int:
    """The request's batch size: the first input's leading dimension."""
    inputs = request.inputs()
    return int(inputs[0].shape()[0]) if inputs and inputs[0].shape() else 1


# One request's answer from ONNX Runtime: its output arrays in config order, or an error message.
Result = list[NDArray[Any]] | str


class Pending:
    """A request as the worker needs it: its sender, copies of its inputs (or why they failed) and
    the names of the outputs it asked for."""

    __slots__ = ("error", "feed", "rows", "sender", "timeout_us", "wanted")

    def __init__(
        self,
        sender: Any,
        feed: dict[str, NDArray[Any]],
        error: str | None,
        rows: int,
        timeout_us: int,
        wanted: frozenset[str],
    ):
        self.sender, self.feed, self.error, self.rows = sender, feed, error, rows
        self.timeout_us, self.wanted = timeout_us, wanted


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
