"""A defect of the builder fails the build (exit 1, the traceback in a log), never as the model's
fault; a model that cannot be built for a reason of its own is left out and the rest published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from builder import pipeline
from builder.cli import main
from builder.errors import ModelRefused
from builder.records import BuildOptions

pytestmark = pytest.mark.slow


def build(project: Path, *extra: str) -> int:
    spec, repo = project / "models.yaml", project / "model_repository"
    return main([*extra, "build", "--spec", str(spec), "--repo", str(repo), "--target", "local"])


def planted_key_error(*args: object, **kwargs: object) -> object:
    raise KeyError("planted")


# Where the fault is planted: a source stage, a variant stage and a verification stage.
PLANTS = {
    "check": ("builder.stages.check.check", "check"),
    "fp16": ("builder.stages.fp16.convert_fp16", "fp16"),
    "verify": ("builder.stages.verify.verify_variant", "verify-fp32"),
}


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_a_planted_fault_fails_the_build_with_exit_1_and_a_log(
    where: str, tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target, stage = PLANTS[where]
    monkeypatch.setattr(target, planted_key_error)
    assert build(tiny_project) == 1
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith("build failed: model 'tiny': "), err
    assert f"{stage} stage: KeyError: 'planted'" in line and "not of the model" in line
    log = Path(line.split("traceback in ")[1].split(";")[0])
    assert log.name == f"{stage}.failure.log" and "planted_key_error" in log.read_text()
    assert not (tiny_project / "model_repository").exists()
    assert not any("not published" in x for x in err)


def test_debug_prints_the_defect_s_traceback(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("builder.stages.fp16.convert_fp16", planted_key_error)
    assert build(tiny_project, "--debug") == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "planted_key_error" in err


def test_an_unbuildable_model_is_left_out_and_the_rest_published(
    tiny_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose tolerance nothing meets, and the ensemble that uses it, are left out with
    one line each; the other model is published and the exit status says something is missing."""
    spec = yaml.safe_load((tiny_project / "models.yaml").read_text())
    tiny = spec["models"][0]
    strict = {**tiny, "name": "strict", "precisions": ["fp16"], "tolerances": {"fp16": {"max_abs": 0.0}}}
    tiny.update(precisions=["fp32"], tolerances={"fp32": tiny["tolerances"]["fp32"]})
    step = {"model": "strict", "inputs": {"x": "x"}, "outputs": {"y": "y"}}
    ensemble = {"name": "strict_ensemble", "inputs": tiny["inputs"], "outputs": tiny["outputs"],
                "max_batch_size": 8, "steps": [step]}  # fmt: skip
    spec.update(models=[tiny, strict], ensembles=[ensemble])
    (tiny_project / "models.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    assert build(tiny_project) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "model 'strict'" in err[-1] and "left out" in err[-1]
    repo = tiny_project / "model_repository"
    manifest = json.loads((repo / "manifest.json").read_text())
    assert sorted(manifest["models"]) == ["tiny"]
    assert not (repo / "strict").exists() and not (repo / "strict_ensemble").exists()


def test_a_dropped_variant_names_the_log_that_keeps_its_traceback(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: object, **kwargs: object) -> object:
        raise ModelRefused("planted refusal")

    monkeypatch.setattr("builder.stages.fp16.convert_fp16", refused)
    lines: list[str] = []
    opts = BuildOptions(tiny_project / "models.yaml", tiny_project / "model_repository", target="local",
                        log=lines.append)  # fmt: skip
    pipeline.build(opts)
    (line,) = [x for x in lines if x.startswith("[tiny] variant fp16 not published")]
    assert "fp16 stage failed: ModelRefused: planted refusal (traceback in " in line
    log = Path(line.split("traceback in ")[1].removesuffix(")"))
    assert log.name == "fp16.failure.log" and "planted refusal" in log.read_text()
    assert "Traceback" in log.read_text()


def test_a_model_left_out_names_the_log_that_keeps_its_traceback(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(*args: object, **kwargs: object) -> object:
        raise ModelRefused("planted refusal")

    monkeypatch.setattr("builder.stages.check.check", refused)
    assert build(tiny_project) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "check stage failed: ModelRefused: planted refusal (traceback in " in line
    log = Path(line.split("traceback in ")[1].split(")")[0])
    assert log.name == "check.failure.log" and "Traceback" in log.read_text()
