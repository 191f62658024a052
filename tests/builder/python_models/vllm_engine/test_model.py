"""The vllm_engine Python model's lifecycle at its seams (test doubles for Triton and the engine):
unload drains the requests in flight, helper threads survive their errors, a dead engine makes the
model unavailable and (with ENABLE_VLLM_HEALTH_CHECK) unloads it, as Triton's vLLM backend does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from builder.python_models.vllm_engine import model as m
from tests.builder.python_models.vllm_engine.doubles import (
    WAIT,
    FakePbUtils,
    RecordingSender,
    running_model,
    use_fake_pb_utils,
)


@pytest.fixture(autouse=True)
def fake_pb_utils(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    use_fake_pb_utils(monkeypatch)
    FakePbUtils.reset()
    yield
    FakePbUtils.reset()


def finished_output(text: str) -> Any:
    piece = SimpleNamespace(
        text=text, token_ids=[1, 2], finish_reason="length", cumulative_logprob=None, logprobs=None, index=0
    )
    return SimpleNamespace(outputs=[piece], finished=True)


class GatedEngine:
    """Test double of AsyncLLM: each request's stream waits until the test opens the gate, then
    ends with one finished output. Records what the sender had received when it was shut down."""

    def __init__(self) -> None:
        self.errored = False
        self.started = threading.Event()
        self.gate: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.final_sent_at_shutdown: bool | None = None
        self.sender: RecordingSender | None = None

    async def generate(
        self, prompt: Any, params: Any, request_id: str, priority: int = 0
    ) -> AsyncIterator[Any]:
        self.gate, self.loop = asyncio.Event(), asyncio.get_running_loop()
        self.started.set()
        await self.gate.wait()
        yield finished_output("done")

    def open(self) -> None:
        assert self.loop is not None and self.gate is not None
        self.loop.call_soon_threadsafe(self.gate.set)

    async def abort(self, request_id: str) -> None:
        pass

    def shutdown(self) -> None:
        assert self.sender is not None
        self.final_sent_at_shutdown = self.sender.final_sent.is_set()


def lane(engine: Any = None) -> m.Lane:
    lane = m.Lane(m.LaneRule("default"), 4, m.Metrics(None, {}))
    lane.engine = engine
    return lane


def job(sender: RecordingSender, on: m.Lane) -> m.Job:
    parsed = m.Parsed("Hi", None, True, True, set(), {}, 0)
    return m.Job(sender, parsed, "Hi", [1], SimpleNamespace(), on, frozenset({"text_output"}))


def test_unload_drains_the_requests_in_flight_and_sends_their_final_responses() -> None:
    engine, sender = GatedEngine(), RecordingSender()
    engine.sender = sender
    default = lane(engine)
    with running_model([default]) as model:
        running = job(sender, default)
        assert model._admit(running)
        asyncio.run_coroutine_threadsafe(model._generate(running), model.loop)
        assert engine.started.wait(WAIT)
        finalize = threading.Thread(target=model.finalize)
        finalize.start()
        assert FakePbUtils.log_event.wait(WAIT)  # finalize() says it waits for the request
        assert ("info", "vllm_engine: awaiting 1 requests in flight") in FakePbUtils.logged
        assert not sender.final_sent.is_set()
        engine.open()
        finalize.join(WAIT)
        assert not finalize.is_alive()
    final = sender.replies[-1]
    assert final.error is None and final.output_tensors[0].array[0] == b"done"  # not cancelled
    assert engine.final_sent_at_shutdown is True  # the engine stopped only after the final response


class RaisingSender(RecordingSender):
    def is_cancelled(self) -> bool:
        self.asked.set()
        raise RuntimeError("sender gone")


def test_an_error_on_the_sending_thread_is_logged_and_the_thread_goes_on() -> None:
    broken, healthy = RaisingSender(), RecordingSender()
    default = lane(SimpleNamespace(errored=False))
    with running_model([default]) as model:
        model.outbox.put((job(broken, default), None, 0))  # watched: its is_cancelled() raises
        assert broken.asked.wait(WAIT)
        later = job(healthy, default)
        model.outbox.put(
            (later, FakePbUtils.InferenceResponse(), FakePbUtils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        )
        assert healthy.final_sent.wait(WAIT)  # still sending
        assert model.failure is None
    assert any(level == "warn" and "sender gone" in text for level, text in FakePbUtils.logged)


class FakeRequest:
    def __init__(self) -> None:
        self.sender = RecordingSender()

    def get_response_sender(self) -> RecordingSender:
        return self.sender


@pytest.mark.parametrize("health_check", [True, False])
def test_a_dead_engine_makes_the_model_unavailable_and_unloads_it_with_the_health_check(
    health_check: bool,
) -> None:
    engine = SimpleNamespace(errored=False)
    with running_model([lane(engine)], health_check=health_check) as model:
        engine.errored = True  # vLLM's monitor marks the engine so when its core process dies
        assert FakePbUtils.log_event.wait(WAIT)
        if health_check:
            assert FakePbUtils.unload_event.wait(WAIT)
        request = FakeRequest()
        model.execute([request])
    assert model.failure == "the vLLM engine of lane(s) default died"
    assert FakePbUtils.unloaded == (["smollm2"] if health_check else [])
    reply = request.sender.replies[-1]
    assert reply.error.code == "UNAVAILABLE" and reply.error.message == m.UNHEALTHY
    assert request.sender.final_sent.is_set()


def test_a_thread_that_dies_fails_the_model() -> None:
    with running_model([lane(SimpleNamespace(errored=False))], health_check=True) as model:
        model.loop.call_soon_threadsafe(model.loop.stop)  # run_forever returns: not a death
        model.loop_thread.join(WAIT)
        assert model.failure is None

        def crash() -> None:
            raise RuntimeError("boom")

        dying = threading.Thread(target=model._guarded, args=(crash,), name="vllm-test")
        dying.start()
        dying.join(WAIT)
    assert model.failure == "thread vllm-test stopped (RuntimeError: boom)"
    assert FakePbUtils.unloaded == ["smollm2"]
    assert any(level == "error" and "RuntimeError: boom" in text for level, text in FakePbUtils.logged)
