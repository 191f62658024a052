"""Cancellation in the vllm_engine Python model, at its seams: test doubles stand for the response
sender, the engine and ``triton_python_backend_utils`` (none exist outside tritonserver)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from builder.python_models.vllm_engine import model as m
from builder.python_models.vllm_engine.utils import sending
from builder.python_models.vllm_engine.utils.responses import STALL_PERIOD
from tests.builder.python_models.vllm_engine.doubles import (
    FINAL,
    WAIT,
    FakePbUtils,
    RecordingSender,
    running_model,
    use_fake_pb_utils,
)


class PendingEngine:
    """Test double of AsyncLLM caught between registering a request and adding it to the engine
    core: its stream never yields, and, like vLLM in that window, it aborts nothing when cancelled."""

    def __init__(self, lane: m.Lane) -> None:
        self.lane = lane
        self.registered = threading.Event()
        self.aborted: list[tuple[str, int]] = []  # (request id, requests in flight at the abort)
        self.errored = False

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
    use_fake_pb_utils(monkeypatch)
    with running_model() as model:
        yield model


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


def test_a_streamed_request_is_asked_after_each_response_and_swept_only_once_its_responses_stop(
    model: m.TritonPythonModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Triton's vLLM backend asks before each response, the asking follows the responses (at most
    once a STREAM_ASK_PERIOD); a request without a streamed response yet is asked at every sweep."""
    sender, other = RecordingSender(), RecordingSender()
    streamed, waiting = job(sender), job(other)
    watched = {streamed.id: streamed, waiting.id: waiting}
    model._handle((streamed, FakePbUtils.InferenceResponse(), 0), watched)
    assert [call for call, _, _ in sender.calls] == ["send", "is_cancelled"]
    monkeypatch.setattr(sending, "STREAM_ASK_PERIOD", 3600.0)  # the next response comes within it
    model._handle((streamed, FakePbUtils.InferenceResponse(), 0), watched)
    assert [call for call, _, _ in sender.calls] == ["send", "is_cancelled", "send"]
    model._check_cancelled(watched)
    assert [call for call, _, _ in sender.calls] == ["send", "is_cancelled", "send"]  # asked lately
    assert [call for call, _, _ in other.calls] == ["is_cancelled"]
    streamed.asked -= STALL_PERIOD  # its responses stopped
    model._check_cancelled(watched)
    assert [call for call, _, _ in sender.calls] == ["send", "is_cancelled", "send", "is_cancelled"]
    model._handle((streamed, FakePbUtils.InferenceResponse(), FINAL), watched)
    model._check_cancelled(watched)
    assert [call for call, _, _ in sender.calls][-1] == "send" and streamed.id not in watched


def test_the_sending_thread_wakes_only_when_a_question_is_due(model: m.TritonPythonModel) -> None:
    """No clock of its own: the next sweep is the earliest question due (a WATCH_PERIOD after the
    last for a request without a streamed response, a STALL_PERIOD for a streamed one), and the
    engines' check every ENGINE_PERIOD when nothing is watched."""
    now = 1000.0
    assert model._due_at({}, now) == now + sending.ENGINE_PERIOD
    waiting, streamed = job(RecordingSender()), job(RecordingSender())
    waiting.asked = streamed.asked = now
    streamed.streaming = True
    assert model._due_at({streamed.id: streamed}, now) == now + STALL_PERIOD
    both = {streamed.id: streamed, waiting.id: waiting}
    assert model._due_at(both, now) == now + sending.WATCH_PERIOD
    waiting.asked = now - 10  # overdue: asked at the next turn, never in a busy loop
    assert model._due_at(both, now) == now + sending.WATCH_PERIOD / 10
