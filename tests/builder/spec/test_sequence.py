"""The ``sequence:`` section of a stateful model: what the spec refuses, each in one line naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.errors import SpecError
from builder.spec import load_spec
from builder.spec.graph import DEFAULT_MAX_BATCH_SIZE
from tests.builder.fixtures.recurrent import entries, write_project


def error_for(tmp_path: Path, **changes: Any) -> str:
    entry = {**entries()[1], **changes}  # rnn: batched, a START control
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = info.value.one_line()
    assert "\n" not in line
    return line


def sequence(**changes: Any) -> dict[str, Any]:
    return {**entries()[1]["sequence"], **changes}


def state(**changes: Any) -> list[dict[str, Any]]:
    return [{**entries()[1]["sequence"]["state"][0], **changes}]


def test_the_fixture_specs_load(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": entries()}))
    vad, rnn = load_spec(path).models
    assert vad.sequence is not None and vad.sequence.state[0].dims == [2, 1, 8]
    assert rnn.sequence is not None and rnn.sequence.hidden_inputs() == ["h", "START"]
    assert rnn.sequence.max_candidate_sequences == 64  # interleaved sequences never wait for a slot


def test_a_stateful_model_refuses_dynamic_batching(tmp_path: Path) -> None:
    line = error_for(tmp_path, batching={"max_queue_delay_us": 100})
    assert "model 'rnn'" in line and "batching:" in line and "sequence batcher" in line


def test_state_dims_are_fixed(tmp_path: Path) -> None:
    line = error_for(tmp_path, sequence=sequence(state=state(dims=[-1])))
    assert "sequence.state[0].dims" in line and "give each size" in line


def test_a_state_is_not_also_a_client_input(tmp_path: Path) -> None:
    inputs = [*entries()[1]["inputs"], {"name": "h", "dtype": "FP32", "dims": [8]}]
    assert "sequence.state[0].input: 'h' is a state" in error_for(tmp_path, inputs=inputs)


def test_a_control_is_not_a_client_input(tmp_path: Path) -> None:
    inputs = [*entries()[1]["inputs"], {"name": "START", "dtype": "INT32", "dims": [1]}]
    assert "sequence.controls.start: 'START' is a control" in error_for(tmp_path, inputs=inputs)


def test_names_appear_once_among_states_and_controls(tmp_path: Path) -> None:
    line = error_for(tmp_path, sequence=sequence(controls={"start": "h"}))
    assert "sequence" in line and "'h' is named twice" in line


def test_control_types_are_triton_s(tmp_path: Path) -> None:
    line = error_for(tmp_path, sequence=sequence(controls={"start": "START", "dtype": "INT64"}))
    assert "sequence.controls.dtype" in line and "BOOL, INT32, FP32" in line


def test_candidate_sequences_are_for_the_oldest_strategy(tmp_path: Path) -> None:
    line = error_for(tmp_path, sequence=sequence(strategy="direct", max_candidate_sequences=4))
    assert "max_candidate_sequences is for strategy 'oldest' only" in line


def test_warmup_and_int8_are_refused(tmp_path: Path) -> None:
    assert "warmup:" in error_for(tmp_path, warmup={"batch_sizes": [1]})
    calibration = {"data": "rnn.npz"}
    tolerances = {"fp32": {"max_abs": 1e-5}, "int8": {"min_cosine": 0.9}}
    line = error_for(tmp_path, precisions=["fp32", "int8"], calibration=calibration, tolerances=tolerances)
    assert "precisions: int8" in line and "int8_dynamic" in line


def test_unknown_sequence_fields_are_named(tmp_path: Path) -> None:
    assert "sequence.states" in error_for(tmp_path, sequence={**sequence(), "states": []})


@pytest.mark.parametrize(("name", "max_batch_size"), [("vad", 0), ("rnn", DEFAULT_MAX_BATCH_SIZE)])
def test_tensors_read_from_the_graph_leave_out_states_and_controls(
    tmp_path: Path, name: str, max_batch_size: int
) -> None:
    write_project(tmp_path)
    entry = dict(next(e for e in entries() if e["name"] == name))
    for key in ("inputs", "outputs", "max_batch_size"):
        entry.pop(key)
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}))
    [spec] = load_spec(path).models
    assert [t.name for t in spec.inputs] == ["x"] and [t.name for t in spec.outputs] == ["y"]
    # vad's state [2, B, 8] has its batch on axis 1: served without Triton's batch dimension
    assert spec.max_batch_size == max_batch_size
