"""Cancellation in the vllm_engine Python model, at its seams: test doubles stand for the response
sender, the engine and ``triton_python_backend_utils`` (none exist outside tritonserver)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from builder.python_models.vllm_engine import model as m

FINAL = 1
WAIT = 10.0  # seconds: only a failing test waits this long


class FakePbUtils:
    """Test double of triton_python_backend_utils: the names the model's response path uses."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL

    class TritonError:
        INVALID_ARG, INTERNAL, CANCELLED, UNAVAILABLE = "INVALID_ARG", "INTERNAL", "CANCELLED", "UNAVAILABLE"

        def __init__(self, message: str, code: str) -> None:
            self.message, self.code = message, code

    class InferenceResponse:
        def __init__(self, output_tensors: Any = None, error: Any = None) -> None:
            self.output_tensors, self.error = output_tensors, error

    class Logger:
        @staticmethod
        def log_warn(message: str) -> None:
            pass


class RecordingSender:
    """Test double of a response sender that records which thread called it, and when."""

    def __init__(self) -> None:
        self.cancelled = False
        self.final_sent = threading.Event()
        self.asked = threading.Event()
        self.calls: list[tuple[str, str, bool]] = []  # (call, thread name, after the final response)
        self.replies: list[Any] = []

    def send(self, reply: Any, flags: int = 0) -> None:
        self.calls.append(("send", threading.current_thread().name, self.final_sent.is_set()))
        self.replies.append(reply)
        if flags & FINAL:
            self.final_sent.set()

    def is_cancelled(self) -> bool:
        self.calls.append(("is_cancelled", threading.current_thread().name, self.final_sent.is_set()))
        self.asked.set()
        return self.cancelled


class PendingEngine:
    """Test double of AsyncLLM caught between registering a request and adding it to the engine
    core: its stream never yields, and, like vLLM in that window, it aborts nothing when cancelled."""

    def __init__(self, lane: m.Lane) -> None:
        self.lane = lane
        self.registered = threading.Event()
        self.aborted: list[tuple[str, int]] = []  # (request id, requests in flight at the abort)

    async def generate(
        self, prompt: Any, params: Any, request_id: str, priority: int = 0
    ) -> AsyncIterator[Any]:
        self.registered.set()
        await asyncio.Event().wait()
        yield None  # pragma: no cover - never reached

    async def abort(self, request_id: str) -> None:
        self.aborted.append((request_id, self.lane.inflight))


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[m.TritonPythonModel]:
    """The model's request state and its sending thread, without Triton or an engine."""
    monkeypatch.setattr(m, "pb_utils", FakePbUtils)
    model = object.__new__(m.TritonPythonModel)
    model.jobs, model.lock, model.outbox = {}, threading.Lock(), queue.Queue()
    model.loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=model.loop.run_forever, daemon=True)
    loop_thread.start()
    sender_thread = threading.Thread(target=model._send_loop, name="vllm-send", daemon=True)
    sender_thread.start()
    yield model
    model.outbox.put(None)
    sender_thread.join(WAIT)
    model.loop.call_soon_threadsafe(model.loop.stop)
    loop_thread.join(WAIT)
    model.loop.close()


def job(sender: RecordingSender, lane: m.Lane | None = None) -> m.Job:
    parsed = m.Parsed("Hi", None, True, True, set(), {}, 0)
    lane = lane or m.Lane(m.LaneRule("default"), 4, m.Metrics(None, {}))
    return m.Job(sender, parsed, "Hi", [1], SimpleNamespace(), lane, frozenset())


def test_is_cancelled_is_asked_only_on_the_sending_thread_and_never_after_the_final_response(
    model: m.TritonPythonModel,
) -> None:
    first, second = RecordingSender(), RecordingSender()
    one = job(first)
    model.outbox.put((one, None, 0))  # admitted: watched from now on
    assert first.asked.wait(WAIT)
    model.outbox.put((one, FakePbUtils.InferenceResponse(), FINAL))
    assert first.final_sent.wait(WAIT)
    model.outbox.put((job(second), None, 0))
    assert second.asked.wait(WAIT)  # a cancellation check ran after the first request's final response
    assert {thread for _, thread, _ in first.calls + second.calls} == {"vllm-send"}
    assert not [call for call in first.calls if call[2]]  # nothing at all after the final response
    assert [call for call, _, _ in first.calls].count("send") == 1


def test_a_request_cancelled_before_the_engine_added_it_is_aborted_before_its_slot_is_freed(
    model: m.TritonPythonModel,
) -> None:
    sender = RecordingSender()
    cancelled = job(sender)
    engine = PendingEngine(cancelled.lane)
    cancelled.lane.engine = engine
    assert model._admit(cancelled)
    asyncio.run_coroutine_threadsafe(model._generate(cancelled), model.loop)
    assert engine.registered.wait(WAIT)
    sender.cancelled = True
    assert sender.final_sent.wait(WAIT)
    assert engine.aborted == [(cancelled.id, 1)]  # aborted explicitly, while it still held its slot
    assert sender.replies[-1].error.code == "CANCELLED" and cancelled.lane.inflight == 0
    assert cancelled.id not in model.jobs
