"""A profile's opt for dynamic dims nothing sized: probed with ONNX Runtime when the first guess does
not run, and the reference stage's one-line error naming the fix when no shape tried runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from builder.data import synthetic_samples
from builder.errors import ModelRefused
from builder.spec import load_spec
from builder.spec.graph import DYNAMIC_MAX, DYNAMIC_OPT
from builder.spec.probe import probe_record
from tests.builder.fixtures import foreign_onnx as f
from tests.builder.fixtures import guessed_shapes as g


def _spec(tmp_path: Path, **entry: object) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "front", **entry}]}))
    return path


def test_a_graph_that_needs_a_window_gets_the_first_doubling_that_runs_as_min_and_opt(
    tmp_path: Path,
) -> None:
    f.save(g.audio_front_end(512), tmp_path / "front.onnx")
    model = load_spec(_spec(tmp_path, source="front.onnx")).models[0]
    shapes = model.profiles[0].shapes["waveform"]
    assert (shapes.min, shapes.opt, shapes.max) == ([512], [512], [DYNAMIC_MAX])
    probe = probe_record(tmp_path / "front.onnx", "front")
    assert probe is not None and probe.ran
    assert "waveform [512] (waveform [64], [128], [256] did not run)" in probe.describe()
    lines: list[str] = []
    samples = synthetic_samples(model, spec_dir=tmp_path, log=lines.append)
    assert samples["waveform"].shape == (8, 512)
    assert lines == [f"[front] {probe.describe()}"]


def test_a_graph_that_runs_at_the_guess_keeps_it_and_says_nothing(tmp_path: Path) -> None:
    f.save(g.audio_front_end(32), tmp_path / "front.onnx")
    model = load_spec(_spec(tmp_path, source="front.onnx")).models[0]
    shapes = model.profiles[0].shapes["waveform"]
    assert (shapes.min, shapes.opt) == ([1], [DYNAMIC_OPT])
    assert probe_record(tmp_path / "front.onnx", "front") is None
    lines: list[str] = []
    synthetic_samples(model, spec_dir=tmp_path, log=lines.append)
    assert lines == []


def test_samples_or_a_profile_leave_nothing_to_probe(tmp_path: Path) -> None:
    f.save(g.audio_front_end(512), tmp_path / "front.onnx")
    np.savez(tmp_path / "eval.npz", waveform=np.ones((2, 700), np.float32), sample_rate=np.ones(2, np.int64))
    model = load_spec(_spec(tmp_path, source="front.onnx", evaluation={"data": "eval.npz"})).models[0]
    assert model.profiles[0].shapes["waveform"].opt == [700]
    lines: list[str] = []
    synthetic_samples(model, spec_dir=tmp_path, log=lines.append)
    assert lines == []


def test_when_no_shape_tried_runs_the_refusal_says_the_samples_were_a_guess_and_what_fixes_it(
    tmp_path: Path,
) -> None:
    f.save(g.audio_front_end(4096), tmp_path / "front.onnx")
    model = load_spec(_spec(tmp_path, source="front.onnx")).models[0]
    assert model.profiles[0].shapes["waveform"].opt == [DYNAMIC_OPT]  # left as guessed
    with pytest.raises(ModelRefused) as err:
        synthetic_samples(model, spec_dir=tmp_path)
    line = str(err.value)
    assert line.startswith(
        "synthetic samples at a guessed shape do not run (give `evaluation:` data, or `profiles:` "
        "with shapes the model runs): ONNX Runtime refused waveform [64], [128], [256], [512], [1024]: "
    )
    assert "Invalid input shape" in line and "[ONNXRuntimeError]" not in line and "\n" not in line


def test_a_spec_loaded_again_is_not_probed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.spec import probe

    f.save(g.audio_front_end(256), tmp_path / "front.onnx")
    spec = _spec(tmp_path, source="front.onnx")
    assert load_spec(spec).models[0].profiles[0].shapes["waveform"].opt == [256]
    monkeypatch.setattr(probe, "_session", lambda model: pytest.fail("probed again"))
    assert load_spec(spec).models[0].profiles[0].shapes["waveform"].opt == [256]


def test_a_graph_over_the_size_limit_is_left_as_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from builder.spec import probe

    monkeypatch.setattr(probe, "PROBE_MAX_BYTES", 1000)
    f.save(g.audio_front_end(384), tmp_path / "front.onnx")
    model = load_spec(_spec(tmp_path, source="front.onnx")).models[0]
    assert model.profiles[0].shapes["waveform"].opt == [DYNAMIC_OPT]
