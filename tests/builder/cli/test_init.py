"""``tritonforge init``: a spec entry read from an ONNX graph, printed or appended, that builds as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from builder.cli import main
from builder.pipeline import build
from builder.records import BuildOptions
from builder.spec import load_spec
from tests.builder.fixtures import foreign_onnx as f
from tests.builder.fixtures.variants import passed_on_onnxruntime


def test_prints_an_entry_stating_tensors_profile_precisions_and_tolerances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f.save(f.conv_graph(11), tmp_path / "Conv Net.onnx")
    np.savez(tmp_path / "cal.npz", x=np.zeros((4, 3, 20, 28), np.float32))
    monkeypatch.chdir(tmp_path)
    assert main(["init", "Conv Net.onnx", "--calibration", "cal.npz"]) == 0
    (entry,) = yaml.safe_load(capsys.readouterr().out)["models"]
    assert entry["name"] == "Conv_Net" and entry["source"] == "Conv Net.onnx"
    assert entry["max_batch_size"] == 8
    assert entry["inputs"] == [{"name": "x", "dtype": "FP32", "dims": [3, -1, -1]}]
    assert entry["profiles"][0]["shapes"]["x"]["opt"] == [3, 20, 28]  # the samples' size
    assert entry["precisions"] == ["fp32", "fp16", "int8"]
    assert set(entry["tolerances"]) == {"fp32", "fp16", "int8"}


@pytest.mark.slow
def test_appends_under_models_keeping_the_file_and_the_spec_builds_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f.save(f.slashed_names_graph(), tmp_path / "onnx" / "names.onnx")
    f.save(f.batch_on_axis_1_graph(), tmp_path / "onnx" / "cell.onnx")
    spec = tmp_path / "models.yaml"
    assert main(["init", str(tmp_path / "onnx" / "names.onnx"), "--append", str(spec)]) == 0
    spec.write_text("# my models\n" + spec.read_text())
    assert main(["init", str(tmp_path / "onnx" / "cell.onnx"), "--append", str(spec)]) == 0
    assert spec.read_text().startswith("# my models\nmodels:\n")
    assert [m.name for m in load_spec(spec).models] == ["names", "cell"]
    assert load_spec(spec).models[0].source == "onnx/names.onnx"
    result = build(BuildOptions(spec, tmp_path / "repo", target="local", log=lambda _: None))
    assert passed_on_onnxruntime(result) == {
        "names": ["fp32", "fp16"], "cell": ["fp32", "fp16"],
    }  # fmt: skip


def test_refusals_are_one_line_with_status_2_and_leave_the_spec_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f.save(f.slashed_names_graph(), tmp_path / "names.onnx")
    spec = tmp_path / "models.yaml"
    assert main(["init", str(tmp_path / "names.onnx"), "--append", str(spec)]) == 0
    before = spec.read_text()
    capsys.readouterr()
    assert main(["init", str(tmp_path / "names.onnx"), "--append", str(spec)]) == 2
    assert "a model named 'names' exists already" in capsys.readouterr().err
    assert main(["init", str(tmp_path), "--append", str(spec)]) == 2
    assert "no config.json: not a Hugging Face checkpoint folder" in capsys.readouterr().err
    spec.write_text(before + "llms: []\n")
    assert main(["init", str(tmp_path / "names.onnx"), "--name", "other", "--append", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be the file's last section" in err
    assert spec.read_text() == before + "llms: []\n"


def test_a_graph_that_needs_a_window_gets_the_probed_shape_written_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.builder.fixtures import guessed_shapes

    f.save(guessed_shapes.audio_front_end(512), tmp_path / "front.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "front.onnx"]) == 0
    out, err = capsys.readouterr()
    (entry,) = yaml.safe_load(out)["models"]
    assert entry["profiles"][0]["shapes"]["waveform"] == {"min": [512], "opt": [512], "max": [1024]}
    assert "model 'front': dynamic dims probed with ONNX Runtime" in err and "waveform [512]" in err


def test_a_graph_no_probed_shape_runs_gets_its_entry_and_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.builder.fixtures import guessed_shapes

    f.save(guessed_shapes.audio_front_end(4096), tmp_path / "front.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "front.onnx"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["models"][0]["profiles"][0]["shapes"]["waveform"]["opt"] == [64]
    assert "synthetic samples at a guessed shape do not run" in err
    assert "give `evaluation:` data, or `profiles:` with shapes the model runs" in err
