"""The sending thread: every response goes out through it, so the engine's event loop never waits
on the server. It alone asks ``is_cancelled()``, and only of requests whose final response it has
not sent; it drops each sender with its final response (``_release``).

A streamed request's outputs pile up (``_pile``, on the event loop) while its last response waits in
the outbox or is being sent; the next response carries all of them. So a token goes out as soon as
the sending path is free, and tokens are coalesced only when it was not: a reader sees text as it is
made, while a busy server sends fewer, larger responses. ``min_gap`` (the config parameter
``stream_min_gap_ms``) also keeps a stream's responses that far apart; its final one never waits.

The model's streamed responses together are kept within ``max_rate`` a second (the config parameter
``stream_max_responses_per_s``, by default what the CPUs it runs on can send: ``default_rate``). Each
response has a fixed CPU cost on the serving path (the stub's send, tritonserver's gRPC write, the
endpoint's chunk), so where the engine makes tokens faster than the path sends them (a GPU host), the
responses would take the CPU the engine needs. Past the budget, a token waits for the next free
slot and goes out with what its stream made meanwhile: merging by load, never by a fixed count. The
slots are a generic cell rate: one every 1/max_rate seconds, BURST_S x max_rate of them in a burst
(a decode step's outputs of every stream at once go out together); the streams waiting for one are
served in the order they came (``in_line``). Final responses never wait; they take a slot, and may
go beyond the budget.

Each ``is_cancelled()`` is a round trip to the server. A request is asked after a streamed
response the thread sends, as Triton's vLLM backend asks before each, though at most once a
STREAM_ASK_PERIOD: the asking follows the responses, never more often than a clock would. A request
without one yet (waiting, in its prefill, or not streamed) is asked every WATCH_PERIOD, and a
streamed request whose responses stopped every STALL_PERIOD.

The thread wakes for a response or when a request's next question is due, never on a clock of its
own: at one token per response a fixed sweep every WATCH_PERIOD cost a wake-up between two tokens
of a stream, and 20 a second of an idle model. The engines' health is checked with each sweep, and
at least every ENGINE_PERIOD."""

from __future__ import annotations

import os
import queue
import time
import traceback
from collections import deque
from typing import Any

from .health import Health
from .responses import STALL_PERIOD, STREAM_ASK_PERIOD, WATCH_PERIOD, Job, output_response

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

PENDING = "pending"  # an outbox item's reply: the job's piled-up outputs, taken when it is sent
ENGINE_PERIOD = 1.0  # seconds between checks that the engines live, at the longest
# The serving path's CPU per one-token response (the OpenAI endpoint, tritonserver and the stub
# together) at 16 streams, bench/results/llm_openai_cpu.json; and the share of the CPUs the
# responses may take before they merge (the engine needs the rest).
RESPONSE_CPU_S = 860e-6
SERVING_SHARE = 0.5
BURST_S = 0.05  # the budget's slots that may go at once, in seconds of it (BURST_S x max_rate slots)


def default_rate(cpus: int) -> float:
    """Streamed responses a second the serving path sends on ``cpus`` CPUs within its share."""
    return SERVING_SHARE * max(1, cpus) / RESPONSE_CPU_S


CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2's CPU quota: "<quota> <period>" or "max <period>"


def available_cpus(cpu_max: str = CPU_MAX) -> int:
    """The CPUs this process may use: its affinity, within its cgroup's CPU quota (a container
    limited to 2 CPUs on a larger host sees them all in its affinity)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open(cpu_max, encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return max(1, min(cpus, -(-int(quota) // int(period))))


class Sending(Health):
    min_gap = 0.0  # seconds between two responses of a stream at least
    max_rate = 0.0  # the model's streamed responses a second, all streams together (0: no budget)
    slots_at = float("-inf")  # the budget's theoretical time of the next slot (monotonic)
    in_line: deque[Job]  # the streams waiting for a slot, in the order they came
    slot_timer: Any = None  # the event loop's handle that serves them when the next slot is free

    def _post(self, job: Job, reply: Any, flags: int) -> None:
        if job.done:
            return
        if flags:
            with self.lock:
                self._finish(job)
                self.outbox.put((job, reply, flags))  # queued before finalize() can see no jobs
            return
        self.outbox.put((job, reply, flags))

    def _finish(self, job: Job) -> None:
        """The job leaves the count of those in flight (its final response is queued, or will be
        with the outputs it has piled up); under ``self.lock``."""
        job.done = True
        self.jobs.pop(job.id, None)
        job.lane.inflight -= 1
        self.idle.notify_all()

    def _pile(self, job: Job, out: Any) -> None:
        """On the event loop: add an engine output to the job's next response, and queue that
        response unless it is queued already or min_gap since the last has yet to pass."""
        if job.done:
            return
        with self.lock:
            job.pending.append(out)
            if out.finished:
                self._finish(job)
        self._queue_or_wait(job)

    def _queue_or_wait(self, job: Job) -> None:
        """On the event loop: queue the job's next response now, or once its stream's min_gap has
        passed and the model's budget has a slot for it, the streams waiting for one served in
        the order they came (a final response goes at once)."""
        with self.lock:
            if job.queued or not job.pending or (job.done and not job.pending[-1].finished):
                return  # sent or on its way, or ended without its outputs (its final reply is queued)
            now = time.monotonic()
            gap = job.last_sent + self.min_gap - now
            if job.pending[-1].finished or (gap <= 0 and not self.in_line and self._slot_free(now)):
                self._take_slot(now)
                self._queue(job)
                return
            if gap <= 0:
                self._line_up(job, now)
                return
        if job.timer is None:
            job.timer = self.loop.call_later(gap, self._due, job)

    def _slot_free(self, now: float) -> bool:
        return self.max_rate <= 0 or self.slots_at - BURST_S <= now

    def _take_slot(self, now: float) -> None:
        if self.max_rate > 0:
            self.slots_at = max(self.slots_at, now) + 1 / self.max_rate

    def _line_up(self, job: Job, now: float) -> None:
        """The job waits for the budget's next slot, behind the streams that waited before it;
        under ``self.lock``."""
        if not job.in_line:
            job.in_line = True
            self.in_line.append(job)
        if self.slot_timer is None:
            self._serve_line_at_next_slot(now)

    def _next_in_line(self) -> None:
        """On the event loop, when a slot is free: queue the responses of the streams in line, the
        longest waiting first, as far as the budget's slots go."""
        self.slot_timer = None
        with self.lock:
            now = time.monotonic()
            while self.in_line and self._slot_free(now):
                job = self.in_line.popleft()
                job.in_line = False
                if job.queued or not job.pending or job.done:  # its final response went meanwhile
                    continue
                self._take_slot(now)
                self._queue(job)
            if self.in_line:
                self._serve_line_at_next_slot(now)

    def _serve_line_at_next_slot(self, now: float) -> None:
        self.slot_timer = self.loop.call_later(self.slots_at - BURST_S - now, self._next_in_line)

    def _queue(self, job: Job) -> None:
        job.queued = True
        self.outbox.put((job, PENDING, 0))

    def _due(self, job: Job) -> None:
        job.timer = None
        self._queue_or_wait(job)

    def _take(self, job: Job) -> tuple[Any, int]:
        """The response of the job's piled-up outputs and its flags; (None, 0) when there is
        nothing to send (its final response went out already)."""
        with self.lock:
            outs, job.pending, job.queued = job.pending, [], False
            job.last_sent = time.monotonic()
        if not outs or job.sender is None:
            return None, 0
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if outs[-1].finished else 0
        return output_response(job, outs), final

    # -- threads --

    def _send_loop(self) -> None:
        """Send every response; when a request's question is due (``_due_at``), ask the requests
        that got no streamed response lately whether they were cancelled, and check that the
        engines live. Only this thread uses a sender once execute() returned, and never after
        sending its final response, so none is used after python_backend has freed it. An error in
        one step is logged and the loop goes on."""
        watched: dict[str, Job] = {}  # admitted, final response not sent yet: this thread's own
        next_check = time.monotonic() + ENGINE_PERIOD
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
                    if item[1] is None:  # watched from now on: first asked a WATCH_PERIOD on
                        next_check = min(next_check, item[0].asked + WATCH_PERIOD)
                item = ()  # nothing of the last request kept while waiting for the next
                now = time.monotonic()
                if now >= next_check:
                    self._check_cancelled(watched)
                    self._check_engines()
                    next_check = self._due_at(watched, now)
            except Exception:
                pb_utils.Logger.log_error(f"vllm_engine: sending thread: {traceback.format_exc()}")

    def _due_at(self, watched: dict[str, Job], now: float) -> float:
        """When the next sweep is due: the earliest question of a watched request (a WATCH_PERIOD
        after the last one, a STALL_PERIOD for a streamed request), ENGINE_PERIOD at the latest.
        A streamed request asked after a response meanwhile makes the sweep come early, and ask
        nobody."""
        due = now + ENGINE_PERIOD
        for job in watched.values():
            due = min(due, job.asked + (STALL_PERIOD if job.streaming else WATCH_PERIOD))
        return max(due, now + WATCH_PERIOD / 10)

    def _handle(self, item: tuple[Job, Any, int], watched: dict[str, Job]) -> None:
        job, reply, flags = item
        if reply is None:
            watched[job.id] = job
            job.asked = time.monotonic()
            return
        if reply is PENDING:
            reply, flags = self._take(job)
            if reply is None:
                return
        if flags:
            watched.pop(job.id, None)
        try:
            job.sender.send(reply, flags=flags)
        except Exception as exc:  # the client went away; nothing to answer
            pb_utils.Logger.log_warn(f"vllm_engine: response to {job.id} not sent ({exc})")
        finally:
            if flags:
                self._release(job)
        if not flags and job.id in watched:  # a streamed response: ask, as Triton's backend does,
            job.streaming = True  # but at most once a STREAM_ASK_PERIOD (tokens come faster)
            if time.monotonic() - job.asked >= STREAM_ASK_PERIOD:
                self._ask(job, watched)

    def _release(self, job: Job) -> None:
        """Drop the job's sender once its final response went out, as Triton's vLLM backend does: an
        older python_backend frees the request's response factory, which holds the model, only with
        its sender, and one kept alive there keeps Triton from unloading the model."""
        job.sender = None

    def _check_cancelled(self, watched: dict[str, Job]) -> None:
        """Ask the requests without a streamed response yet whose last answer is a WATCH_PERIOD
        old, and those whose last answer is older than STALL_PERIOD (their responses stopped)."""
        now = time.monotonic()
        for job in list(watched.values()):
            if now - job.asked >= (STALL_PERIOD if job.streaming else WATCH_PERIOD):
                self._ask(job, watched)

    def _ask(self, job: Job, watched: dict[str, Job]) -> None:
        job.asked = time.monotonic()
        try:
            cancelled = job.sender.is_cancelled()
        except Exception as exc:  # its sender is unusable: stop asking, let it run to its end
            del watched[job.id]
            pb_utils.Logger.log_warn(f"vllm_engine: is_cancelled() of {job.id} failed ({exc})")
            return
        if cancelled:
            del watched[job.id]  # its final response (CANCELLED) is still to come
            self.loop.call_soon_threadsafe(job.task.cancel)
