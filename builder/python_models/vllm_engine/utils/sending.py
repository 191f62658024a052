"""The sending thread: every response goes out through it, so the engine's event loop never waits
on the server. It alone asks ``is_cancelled()``, and only of requests whose final response it has
not sent; it drops each sender with its final response (``_release``).

Each ``is_cancelled()`` is a round trip to the server. A request is asked after a streamed
response the thread sends, as Triton's vLLM backend asks before each, though at most once a
WATCH_PERIOD: the asking follows the responses (fewer with the engine's ``stream_interval``), never
more often than a clock would. A request without one yet (waiting, in its prefill, or not streamed)
is asked every WATCH_PERIOD, and a streamed request whose responses stopped every STALL_PERIOD."""

from __future__ import annotations

import queue
import time
import traceback
from typing import Any

from .health import Health
from .responses import STALL_PERIOD, WATCH_PERIOD, Job

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None


class Sending(Health):
    def _post(self, job: Job, reply: Any, flags: int) -> None:
        if job.done:
            return
        if flags:
            job.done = True
            with self.lock:
                self.jobs.pop(job.id, None)
                job.lane.inflight -= 1
                self.outbox.put((job, reply, flags))  # queued before finalize() can see no jobs
                self.idle.notify_all()
            return
        self.outbox.put((job, reply, flags))

    # -- threads --

    def _send_loop(self) -> None:
        """Send every response; every WATCH_PERIOD, ask the requests that got no streamed response
        lately whether they were cancelled, and check that the engines live. Only this thread uses
        a sender once execute() returned, and never after sending its final response, so none is
        used after python_backend has freed it. An error in one step is logged and the loop goes on."""
        watched: dict[str, Job] = {}  # admitted, final response not sent yet: this thread's own
        next_check = time.monotonic() + WATCH_PERIOD
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
                item = ()  # nothing of the last request kept while waiting for the next
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + WATCH_PERIOD
                    self._check_cancelled(watched)
                    self._check_engines()
            except Exception:
                pb_utils.Logger.log_error(f"vllm_engine: sending thread: {traceback.format_exc()}")

    def _handle(self, item: tuple[Job, Any, int], watched: dict[str, Job]) -> None:
        job, reply, flags = item
        if reply is None:
            watched[job.id] = job
            job.asked = time.monotonic()
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
            job.streaming = True  # but at most once a WATCH_PERIOD (tokens may come faster)
            if time.monotonic() - job.asked >= WATCH_PERIOD:
                self._ask(job, watched)

    def _release(self, job: Job) -> None:
        """Drop the job's sender once its final response went out, as Triton's vLLM backend does: an
        older python_backend frees the request's response factory, which holds the model, only with
        its sender, and one kept alive there keeps Triton from unloading the model."""
        job.sender = None

    def _check_cancelled(self, watched: dict[str, Job]) -> None:
        """Ask the requests without a streamed response yet, and those whose last answer is older
        than STALL_PERIOD (their responses stopped coming)."""
        now = time.monotonic()
        for job in list(watched.values()):
            if not job.streaming or now - job.asked >= STALL_PERIOD:
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
