"""How the vllm_engine model coalesces a stream's tokens: each response goes out as soon as the one
before has been sent, carrying what the engine made meanwhile, and no sooner than ``min_gap`` after
it. The engine's outputs are fed by the test and the sender blocks until the test lets it go, so the
order of events is the test's, not a clock's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from builder.python_models.vllm_engine import model as m
from tests.builder.python_models.vllm_engine.doubles import FINAL, WAIT, running_model, use_fake_pb_utils


class HeldSender:
    """A response sender whose send() waits until the test releases it, as a busy server would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int]] = []  # (text, tokens, flags)
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.final_sent = threading.Event()

    def send(self, reply: Any, flags: int = 0) -> None:
        outputs = {t.name: t.array for t in reply.output_tensors}
        text = outputs["text_output"][0].decode()
        self.sent.append((text, int(outputs["num_output_tokens"][0]), flags))
        self.entered.release()
        assert self.release.acquire(timeout=WAIT)
        if flags & FINAL:
            self.final_sent.set()

    def is_cancelled(self) -> bool:
        return False


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[m.TritonPythonModel]:
    use_fake_pb_utils(monkeypatch)
    with running_model() as model:
        yield model


def output(text: str, finished: bool = False) -> Any:
    piece = SimpleNamespace(index=0, text=text, token_ids=(len(text),), logprobs=None,
                            finish_reason="stop" if finished else None, cumulative_logprob=None)  # fmt: skip
    return SimpleNamespace(finished=finished, outputs=[piece])


def admitted(model: m.TritonPythonModel, sender: HeldSender) -> m.Job:
    parsed = m.Parsed("Hi", None, True, True, {"return_num_output_tokens"}, {}, 0)
    lane = m.Lane(m.LaneRule("default"), 4, m.Metrics(None, {}))
    job = m.Job(sender, parsed, "Hi", [1], SimpleNamespace(), lane,
                frozenset({"text_output", "num_output_tokens"}))  # fmt: skip
    assert model._admit(job)
    return job


def pile(model: m.TritonPythonModel, job: m.Job, out: Any) -> None:
    """The engine's output handed over on the model's event loop, as _generate does."""

    async def step() -> None:
        model._pile(job, out)

    asyncio.run_coroutine_threadsafe(step(), model.loop).result(WAIT)


def test_a_token_goes_out_at_once_and_what_came_while_a_response_was_sent_goes_next(
    model: m.TritonPythonModel,
) -> None:
    sender = HeldSender()
    job = admitted(model, sender)
    pile(model, job, output("a"))
    assert sender.entered.acquire(timeout=WAIT)  # sent alone, at once: the path was free
    pile(model, job, output("b"))  # made while "a" was being sent
    pile(model, job, output("c"))
    sender.release.release()
    assert sender.entered.acquire(timeout=WAIT)
    pile(model, job, output("d", finished=True))
    sender.release.release()
    sender.release.release()
    assert sender.final_sent.wait(WAIT)
    assert sender.sent == [("a", 1, 0), ("bc", 2, 0), ("d", 1, FINAL)]
    assert job.id not in model.jobs and job.lane.inflight == 0


def test_min_gap_holds_a_streams_tokens_back_but_never_its_final_response(
    model: m.TritonPythonModel,
) -> None:
    model.min_gap = 3600.0
    sender = HeldSender()
    job = admitted(model, sender)
    for _ in range(3):
        sender.release.release()
    pile(model, job, output("a"))
    assert sender.entered.acquire(timeout=WAIT)  # the stream's first response waits for nothing
    pile(model, job, output("b"))
    pile(model, job, output("c"))
    assert not sender.entered.acquire(timeout=0.2)  # held: min_gap has not passed
    pile(model, job, output("d", finished=True))
    assert sender.final_sent.wait(WAIT)
    assert sender.sent == [("a", 1, 0), ("bcd", 3, FINAL)]
