"""Foreign graphs whose inputs the spec leaves to a guess, through the build: an audio front-end that
needs a window of samples builds from name and source (its opt probed, and said), one written with
its rank-0 sample rate as ``dims: []`` builds too, a token encoder is verified on ids, masks and type
ids it can take, and ONNX Runtime's own lines stay off the console."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.pipeline import build
from builder.records import BuildOptions
from tests.builder.fixtures import guessed_shapes as g
from tests.builder.fixtures.foreign_onnx import save
from tests.builder.fixtures.variants import passed_on_onnxruntime

pytestmark = pytest.mark.slow


def test_guessed_shapes_build_and_onnx_runtime_prints_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    save(g.audio_front_end(512), tmp_path / "front.onnx")
    save(g.token_encoder(), tmp_path / "enc.onnx")
    stated = {
        "inputs": [
            {"name": "waveform", "dtype": "FP32", "dims": [-1]},
            {"name": "sample_rate", "dtype": "INT64", "dims": []},  # as the graph states it
        ],
        "profiles": [{"shapes": {"waveform": {"min": [512], "opt": [800], "max": [4096]}}}],
    }
    models = [
        {"name": "front", "source": "front.onnx", "precisions": ["fp32", "fp16"]},
        {"name": "front_stated", "source": "front.onnx", **stated},
        {"name": "enc", "source": "enc.onnx", "precisions": ["fp32", "fp16"]},
    ]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    lines: list[str] = []
    capfd.readouterr()
    result = build(
        BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lines.append)
    )
    out, err = capfd.readouterr()
    assert result.published
    assert passed_on_onnxruntime(result) == {
        "front": ["fp32", "fp16"], "front_stated": ["fp32"], "enc": ["fp32", "fp16"],
    }  # fmt: skip
    (said,) = [line for line in lines if "probed" in line]
    assert said.startswith("[front] dynamic dims probed with ONNX Runtime") and "waveform [512]" in said
    assert "[E:onnxruntime" not in out + err and "[W:onnxruntime" not in out + err
    stated_model = next(b.spec for b in result.models if b.spec.name == "front_stated")
    assert [t.dims for t in stated_model.inputs] == [[-1], [1]]


def test_a_graph_no_tried_shape_runs_is_left_out_saying_the_samples_were_a_guess(tmp_path: Path) -> None:
    save(g.audio_front_end(4096), tmp_path / "front.onnx")
    save(g.audio_front_end(512), tmp_path / "ok.onnx")
    models = [{"name": "front", "source": "front.onnx"}, {"name": "ok", "source": "ok.onnx"}]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    lines: list[str] = []
    result = build(
        BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lines.append)
    )
    assert [b.spec.name for b in result.models] == ["ok"]
    (said,) = [line for line in lines if line.startswith("[front] left out: ")]
    assert "reference stage failed" in said and "synthetic samples at a guessed shape do not run" in said
    assert "give `evaluation:` data, or `profiles:` with shapes the model runs" in said
