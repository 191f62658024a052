"""``tritonforge engines`` and the engine stage where no plan can be built: one line, and
``--require-engines`` refuses. Detection is replaced so that this holds on a GPU host too."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from builder.cli import engines as cli
from builder.engines import build as engine_build
from builder.engines.build import EngineInput, EnginesRequired, build_all
from builder.engines.detect import TensorRTAvailability
from builder.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
NONE_HERE = TensorRTAvailability(False, "TensorRT is not installed (replaced in this test)")


@pytest.fixture(autouse=True)
def no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "detect", lambda: NONE_HERE)
    monkeypatch.setattr(engine_build, "detect", lambda: NONE_HERE)


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return cli.run(parser.parse_args(["engines", "--spec", str(ROOT / "models.yaml"), *argv]))


def test_cli_skips_in_one_line_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run() == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith("engines: skipped TensorRT plans for simple (fp32), resnet18 (fp32, fp16, int8)")
    assert "TensorRT is not installed" in out[0]


def test_cli_require_engines_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--require-engines") == 2
    assert "skipped TensorRT plans" in capsys.readouterr().err


def test_engine_stage_logs_the_skip_and_goes_on(tmp_path: Path) -> None:
    lines: list[str] = []
    spec = load_spec(ROOT / "models.yaml")
    models = [EngineInput(m, {}, [], None, None, tmp_path) for m in spec.models]
    engines = build_all(models, tmp_path, lines.append, require=False)
    assert len(lines) == 1 and "simple (fp32)" in lines[0]
    summary = engines.summary()
    assert summary.plans == {} and summary.skipped == NONE_HERE.reason
    with pytest.raises(EnginesRequired):
        build_all(models, tmp_path, lines.append, require=True)
