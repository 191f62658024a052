"""builder.stages.sequence: states and controls held against the graph, and the chunks of a sequence
run through ONNX Runtime in a loop with the states carried."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from builder.errors import SpecError
from builder.spec import ModelSpec, Variant, load_spec
from builder.stages.check import compare
from builder.stages.runtimes import open_variant
from builder.stages.sequence import first_step_feed, run_sequence
from tests.builder.fixtures.recurrent import (
    CHUNKS,
    chunks,
    entries,
    onnx_loop,
    rnn_model,
    vad_model,
    write_project,
)


def model(name: str, **changes: object) -> ModelSpec:
    entry = next(e for e in entries() if e["name"] == name)
    return ModelSpec.model_validate({**entry, **changes})


def graph_error(spec: ModelSpec, graph: onnx.ModelProto) -> str:
    with pytest.raises(SpecError) as info:
        compare(spec, onnx.shape_inference.infer_shapes(graph), spec_file=Path("models.yaml"))
    return info.value.one_line()


def with_state(name: str, **changes: object) -> dict[str, object]:
    seq = next(e for e in entries() if e["name"] == name)["sequence"]
    assert isinstance(seq, dict)
    return {**seq, "state": [{**seq["state"][0], **changes}]}


def test_the_graphs_match_their_specs_without_listing_the_states() -> None:
    compare(model("vad"), onnx.shape_inference.infer_shapes(vad_model()), spec_file=Path("models.yaml"))
    compare(model("rnn"), onnx.shape_inference.infer_shapes(rnn_model()), spec_file=Path("models.yaml"))


def test_a_missing_state_output_is_named() -> None:
    line = graph_error(model("vad", sequence=with_state("vad", output="state_out")), vad_model())
    assert "sequence.state[0].output" in line and "no output 'state_out'" in line and "stateN" in line


def test_a_state_dtype_must_match_the_graph() -> None:
    line = graph_error(model("vad", sequence=with_state("vad", dtype="FP16")), vad_model())
    assert "sequence.state[0].dtype" in line and "graph says FP32, spec says FP16" in line


def test_a_state_shape_must_match_the_graph() -> None:
    line = graph_error(model("vad", sequence=with_state("vad", dims=[3, 1, 8])), vad_model())
    assert "sequence.state[0].dims" in line and "graph says 2, spec says 3" in line


def test_a_state_batched_on_axis_1_needs_max_batch_size_0() -> None:
    spec = model("vad", max_batch_size=4, sequence=with_state("vad", dims=[1, 8]),
                 inputs=[{"name": "x", "dtype": "FP32", "dims": [4]}],
                 outputs=[{"name": "y", "dtype": "FP32", "dims": [3]}])  # fmt: skip
    line = graph_error(spec, vad_model())
    assert "max_batch_size" in line and "state input 'state'" in line and "batch dim" in line


def test_a_control_must_be_a_graph_input_of_its_type() -> None:
    seq = {**with_state("rnn"), "controls": {"start": "BEGIN"}}
    assert "sequence.controls.start" in graph_error(model("rnn", sequence=seq), rnn_model())
    seq = {**with_state("rnn"), "controls": {"start": "START", "dtype": "FP32"}}
    line = graph_error(model("rnn", sequence=seq), rnn_model())
    assert "sequence.controls.dtype" in line and "INT32" in line


@pytest.mark.parametrize("name", ["vad", "rnn"])
def test_the_loop_carries_the_state_as_the_server_does(name: str, tmp_path: Path) -> None:
    spec_path = write_project(tmp_path)
    spec = next(m for m in load_spec(spec_path).models if m.name == name)
    stream = chunks(3)
    samples = {"x": stream if spec.max_batch_size == 0 else stream[:, 0]}
    got = run_sequence(open_variant(Variant.parse("fp32"), tmp_path / f"{name}.onnx"), spec, samples)["y"]
    want = np.stack(onnx_loop(name, tmp_path, stream))
    assert got.shape == ((CHUNKS, 1, 3) if spec.max_batch_size == 0 else (CHUNKS, 3))
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-6)
    # The state matters: each chunk alone (from zeros) gives other outputs after the first.
    alone = np.stack([onnx_loop(name, tmp_path, stream[i : i + 1])[0] for i in range(CHUNKS)])
    assert not np.allclose(alone[1:], want[1:], atol=1e-3)


def test_timing_feeds_complete_a_batch_with_initial_states(tmp_path: Path) -> None:
    spec = model("rnn")
    feed = first_step_feed(spec, {"x": np.zeros((5, 4), np.float32)})
    assert feed["h"].shape == (5, 8) and feed["START"].shape == (5, 1) and feed["START"].dtype == np.int32
    assert set(first_step_feed(model("vad"), {"x": np.zeros((1, 4), np.float32)})) == {"x", "state"}


def test_the_spec_file_loads_and_names_the_states(tmp_path: Path) -> None:
    raw = yaml.safe_load(write_project(tmp_path).read_text())
    assert [m["name"] for m in raw["models"]] == ["vad", "rnn"]
