"""clients.core: calls checked and cut into requests, their tensors and answers, the readiness policy
(no server: what the transports would send and receive)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from clients import InvalidInput, InvalidResponse, ModelNotReady, ServerUnavailable, core
from clients.core import Call, InferOptions, Probe, Readiness, output_names, prepare
from clients.retry import Deadline
from clients.settings import Settings
from tests.clients._helpers import expected, simple_info, simple_inputs, text_info

LOCAL = Settings("127.0.0.1:8001", "grpc")


def call_for(inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **options: Any) -> Call:
    opts: InferOptions = options  # type: ignore[assignment]
    return prepare(LOCAL, simple_info(), inputs, outputs, Deadline(None), opts)


class Response:
    """Stands in for tritonclient's InferResult."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.arrays.get(name)


def test_a_batch_above_max_batch_size_is_cut_in_order() -> None:
    inputs = simple_inputs(20)
    call = call_for(inputs)
    assert [p.batch for p in call.parts] == [8, 8, 4]
    np.testing.assert_array_equal(call.parts[2].arrays["INPUT0"], inputs["INPUT0"][16:])
    assert call.outputs == ["OUTPUT0", "OUTPUT1"] and not call.use_shm and call.class_count == 0
    answers = [call.result(p, Response(expected(p.arrays)), {}) for p in call.parts]
    np.testing.assert_array_equal(call.join(answers)["OUTPUT1"], expected(inputs)["OUTPUT1"])


def test_small_and_unbatched_requests_stay_whole() -> None:
    assert [p.batch for p in call_for(simple_inputs(8)).parts] == [8]
    unbatched = {"INPUT0": np.zeros(16, np.int32), "INPUT1": np.zeros(16, np.int32)}
    call = prepare(LOCAL, simple_info(0), unbatched, None, Deadline(None), {})
    assert [p.batch for p in call.parts] == [0]


def test_options_reach_the_call_and_unknown_ones_are_refused() -> None:
    call = call_for(simple_inputs(1), ["OUTPUT1"], version="2", shm=True, class_count=3)
    assert (call.version, call.use_shm, call.class_count, call.outputs) == ("2", True, 3, ["OUTPUT1"])
    with pytest.raises(TypeError, match=r"unknown infer option\(s\) timeot"):
        call_for(simple_inputs(1), timeot=1)


def test_output_names_refuse_unknown_outputs() -> None:
    assert output_names(simple_info(), None) == ["OUTPUT0", "OUTPUT1"]
    with pytest.raises(InvalidInput, match=r"no output\(s\) OUT9 \(outputs: OUTPUT0, OUTPUT1\)"):
        call_for(simple_inputs(1), ["OUTPUT0", "OUT9"])


def test_tensors_carry_data_or_point_at_shared_memory() -> None:
    plain = call_for(simple_inputs(2), ["OUTPUT0"])
    assert plain.shm_plan(plain.parts[0]) is None
    inputs, outputs = plain.tensors(httpclient, plain.parts[0], None)
    assert [t.name() for t in inputs] == ["INPUT0", "INPUT1"] and inputs[0]._get_binary_data() is not None
    assert [o.name() for o in outputs] == ["OUTPUT0"]
    shared = call_for(simple_inputs(2), ["OUTPUT0"], shm=True)
    plan = shared.shm_plan(shared.parts[0])
    assert plan is not None and plan.input_region is not None
    inputs, outputs = shared.tensors(httpclient, shared.parts[0], plan)
    assert inputs[0]._get_binary_data() is None
    assert inputs[0]._get_tensor()["parameters"]["shared_memory_region"] == plan.input_region.name
    assert "shared_memory_region" in outputs[0]._get_tensor()["parameters"]


def test_result_takes_shared_outputs_first_and_checks_shapes() -> None:
    call = call_for(simple_inputs(2))
    part = call.parts[0]
    from_shm = np.full((2, 16), 7, np.int32)
    out = call.result(part, Response({"OUTPUT1": np.zeros((2, 16), np.int32)}), {"OUTPUT0": from_shm})
    assert out["OUTPUT0"] is from_shm and list(out) == ["OUTPUT0", "OUTPUT1"]
    with pytest.raises(InvalidResponse, match=r"output 'OUTPUT0' of shape \[1, 16\], declared \[2, 16\]"):
        call.result(part, Response({"OUTPUT0": np.zeros((1, 16), np.int32), "OUTPUT1": from_shm}), {})


def test_classification_results_are_not_shape_checked() -> None:
    info = text_info()
    call = prepare(
        LOCAL, info, {"TEXT": np.array([["a"]], dtype=object)}, ["LABEL"], Deadline(None), {"class_count": 2}
    )
    entries = np.array([[b"0.9:1:cat", b"0.1:0:dog"]], dtype=object)
    assert call.result(call.parts[0], Response({"LABEL": entries}), {})["LABEL"] is entries


def test_readiness_returns_as_soon_as_ready() -> None:
    wait = Readiness("h:1", "m", timeout=5)
    assert not wait.done(Probe(True, False))
    assert wait.done(Probe(True, True))
    assert Readiness("h:1", None, 5).done(Probe(True, True))


class Clock:
    """clients.core's clock, moved on only by the test: deadlines are checked exactly, whatever the
    machine's speed or load."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    stepped = Clock()
    monkeypatch.setattr(core, "time", stepped)
    return stepped


def test_readiness_backs_off_and_never_waits_past_the_deadline(clock: Clock) -> None:
    wait = Readiness("h:1", None, timeout=0.3, first_delay=0.02, max_delay=0.1)
    delays = [wait.delay() for _ in range(5)]
    assert delays[:3] == pytest.approx([0.02, 0.04, 0.08], abs=1e-9)
    assert delays[3] == pytest.approx(0.1, abs=1e-9) and delays[4] == pytest.approx(0.1, abs=1e-9)
    clock.now = wait.end - 0.01
    assert wait.delay() == pytest.approx(0.01, abs=1e-9)
    clock.now = wait.end + 1
    assert wait.delay() == 0.0


def test_readiness_gives_up_naming_what_was_not_ready(clock: Clock) -> None:
    down = Readiness("h:1", "m", timeout=0)
    with pytest.raises(ServerUnavailable, match="server at h:1 not ready after 0s"):
        down.done(Probe(False))
    model_missing = Readiness("h:1", "m", timeout=0)
    with pytest.raises(ModelNotReady, match="model 'm' not ready after 0s"):
        model_missing.done(Probe(True, False))
    seen_up = Readiness("h:1", "m", timeout=0.05)
    assert not seen_up.done(Probe(True, False))
    clock.now += 0.05
    with pytest.raises(ModelNotReady):  # a failed look that says nothing keeps what was seen
        seen_up.done(Probe(None))


def test_probe_after_an_error() -> None:
    refused = InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE")
    assert Probe.failed(True, refused) == Probe(False)
    assert Probe.failed(None, ConnectionRefusedError()) == Probe(False)
    unknown = InferenceServerException(
        "Request for unknown model: 'm' is not found", status="StatusCode.NOT_FOUND"
    )
    assert Probe.failed(True, unknown) == Probe(True, False)
    assert not Probe(True, False).ready and Probe(True, True).ready and not Probe(None, True).ready
