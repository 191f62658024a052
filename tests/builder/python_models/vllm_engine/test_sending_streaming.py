"""How the vllm_engine model coalesces a stream's tokens: each response goes out as soon as the one
before has been sent, carrying what the engine made meanwhile, and no sooner than ``min_gap`` after
it. The engine's outputs are fed by the test and the sender blocks until the test lets it go, so the
order of events is the test's, not a clock's."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
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


def free_one_slot(model: m.TritonPythonModel) -> None:
    """On the model's event loop: the budget's next slot free now, and the line served."""

    def free() -> None:
        model.slots_at = float("-inf")
        model._next_in_line()

    model.loop.call_soon_threadsafe(free)


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


def test_past_the_models_budget_a_streams_tokens_wait_and_go_together_but_never_a_final_one(
    model: m.TritonPythonModel,
) -> None:
    model.max_rate = 1 / 3600  # one streamed response an hour, all streams together
    first, second = HeldSender(), HeldSender()
    a, b = admitted(model, first), admitted(model, second)
    for sender in (first, second):
        for _ in range(2):
            sender.release.release()
    pile(model, a, output("a"))
    assert first.entered.acquire(timeout=WAIT)  # the budget's slot was free
    pile(model, b, output("x"))  # another stream: the slot is spent
    pile(model, a, output("b"))
    assert not second.entered.acquire(timeout=0.2) and not first.entered.acquire(timeout=0.01)
    pile(model, b, output("y", finished=True))
    assert second.final_sent.wait(WAIT)
    pile(model, a, output("c", finished=True))
    assert first.final_sent.wait(WAIT)
    assert first.sent == [("a", 1, 0), ("bc", 2, FINAL)]
    assert second.sent == [("xy", 2, FINAL)]


def test_within_the_budget_every_token_goes_alone(model: m.TritonPythonModel) -> None:
    model.max_rate = 1000.0  # a burst of BURST_S x 1000 = 50 slots
    sender = HeldSender()
    job = admitted(model, sender)
    for i in range(10):
        sender.release.release()
        pile(model, job, output(str(i), finished=i == 9))
        assert sender.entered.acquire(timeout=WAIT)
    assert sender.final_sent.wait(WAIT)
    assert [text for text, _, _ in sender.sent] == [str(i) for i in range(10)]


def test_the_default_budget_follows_the_cpus_and_the_parameter_overrides_it() -> None:
    from builder.python_models.vllm_engine.utils import sending

    assert sending.default_rate(4) == pytest.approx(2 * sending.default_rate(2))
    assert sending.default_rate(2) == pytest.approx(sending.SERVING_SHARE * 2 / sending.RESPONSE_CPU_S)
    assert m.parse_max_rate("", 123.0) == 123.0
    assert m.parse_max_rate("0", 123.0) == 0.0  # no budget
    assert m.parse_max_rate("250", 123.0) == 250.0
    for bad in ("-1", "fast", "inf"):
        with pytest.raises(ValueError, match="parameter stream_max_responses_per_s"):
            m.parse_max_rate(bad, 123.0)


def test_the_streams_waiting_for_the_budget_get_its_slots_in_the_order_they_came(
    model: m.TritonPythonModel,
) -> None:
    model.max_rate = 1 / 3600  # one slot an hour: the test frees each one itself
    senders = [HeldSender() for _ in range(3)]
    a, b, c = (admitted(model, s) for s in senders)
    for sender in senders:
        for _ in range(3):
            sender.release.release()
    pile(model, a, output("a1"))
    assert senders[0].entered.acquire(timeout=WAIT)
    for job, text in ((b, "b1"), (c, "c1"), (a, "a2")):  # in line, in this order
        pile(model, job, output(text))

    for sender in (senders[1], senders[2], senders[0]):
        assert not any(s.entered.acquire(timeout=0.05) for s in senders)
        free_one_slot(model)
        assert sender.entered.acquire(timeout=WAIT)
    assert [s.sent for s in senders] == [[("a1", 1, 0), ("a2", 1, 0)], [("b1", 1, 0)], [("c1", 1, 0)]]


class FinalOnlySender(HeldSender):
    """Records a final error reply (no text) as the model sends one when a request ends early."""

    def send(self, reply: Any, flags: int = 0) -> None:
        self.sent.append(("", 0, flags))
        self.entered.release()
        if flags & FINAL:
            self.final_sent.set()


def test_a_stream_that_ended_while_in_line_takes_no_slot(model: m.TritonPythonModel) -> None:
    model.max_rate = 1 / 3600
    first, ended, waiting = HeldSender(), FinalOnlySender(), HeldSender()
    a, b, c = admitted(model, first), admitted(model, ended), admitted(model, waiting)
    for sender in (first, waiting):
        sender.release.release()
    pile(model, a, output("a"))
    assert first.entered.acquire(timeout=WAIT)
    pile(model, b, output("x"))  # in line...
    pile(model, c, output("y"))  # ... and behind it
    model._post(b, SimpleNamespace(output_tensors=[]), FINAL)  # b ends early (cancelled, an error)
    assert ended.final_sent.wait(WAIT)

    free_one_slot(model)
    assert waiting.entered.acquire(timeout=WAIT)  # the slot went to c, not to b's leftovers
    assert ended.sent == [("", 0, FINAL)] and waiting.sent == [("y", 1, 0)]


def test_the_budgets_own_timer_serves_the_streams_in_line(model: m.TritonPythonModel) -> None:
    model.max_rate = 20.0  # a slot every 50 ms, one at once
    senders = [HeldSender() for _ in range(4)]
    jobs = [admitted(model, s) for s in senders]
    for sender in senders:
        sender.release.release()
    for i, job in enumerate(jobs):
        pile(model, job, output(str(i)))
    for sender in senders:
        assert sender.entered.acquire(timeout=WAIT)
    assert [s.sent for s in senders] == [[(str(i), 1, 0)] for i in range(4)]


def test_the_cpus_follow_the_cgroups_quota(tmp_path: Path) -> None:
    from builder.python_models.vllm_engine.utils.sending import available_cpus

    cpus = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    assert available_cpus(str(tmp_path / "absent")) == cpus
    quota.write_text("max 100000\n")
    assert available_cpus(str(quota)) == cpus
    quota.write_text("50000 100000\n")
    assert available_cpus(str(quota)) == 1  # half a CPU: at least one
    quota.write_text(f"{100000 * (cpus + 4)} 100000\n")
    assert available_cpus(str(quota)) == cpus  # a quota above the affinity: the affinity
