"""Detection and the one-line skip on this machine (no TensorRT, no GPU): all real."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from builder.engines import cli
from builder.engines import detect as detect_module
from builder.engines.build import EnginesRequired, build_all
from builder.engines.detect import GPU, detect

ROOT = Path(__file__).resolve().parents[3]


def test_detect_says_why_without_crashing() -> None:
    found = detect()
    if found.available:
        pytest.skip("TensorRT and a GPU are present")
    assert "TensorRT" in found.reason and found.version is None


def test_detect_with_tensorrt_but_no_gpu(trt10) -> None:
    found = detect()
    if found.gpu is not None:
        pytest.skip("a GPU is present")
    assert not found.available
    assert found.reason.startswith("TensorRT 10.13.0.35 is installed but no CUDA device")


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("10.7.0.23", "TensorRT 10.7.0.23 is older than 10.8, the oldest this builder supports"),
        ("12.0.0.1", "TensorRT 12.0.0.1 is newer than this builder knows (TensorRT 10.8 to 11.x)"),
    ],
)
def test_a_tensorrt_outside_the_supported_range_is_not_used(monkeypatch, tmp_path, version, why) -> None:
    from engine_support import _install_double

    for _ in _install_double(monkeypatch, tmp_path, version):
        monkeypatch.setattr(detect_module, "first_gpu", lambda: (GPU("NVIDIA A10", "8.6"), ""))
        found = detect()
        assert not found.available and found.reason.startswith(why)
        assert "pip install 'tensorrt>=10.8,<12'" in found.reason


def test_tensorrt_10_8_is_used_and_says_what_it_lacks(trt108, monkeypatch) -> None:
    monkeypatch.setattr(detect_module, "first_gpu", lambda: (GPU("NVIDIA A10", "8.6"), ""))
    found = detect()
    assert found.available and found.version == "10.8.0.43"
    assert found.reason.endswith("lacks HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY (from 10.9)")


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return cli.run(parser.parse_args(["engines", "--spec", str(ROOT / "models.yaml"), *argv]))


def test_cli_skips_in_one_line_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    if detect().available:
        pytest.skip("TensorRT and a GPU are present")
    assert _run() == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith("engines: skipped TensorRT plans for simple (fp32), resnet18 (fp32, fp16, int8)")
    assert "TensorRT is not installed" in out[0] or "no CUDA device" in out[0]


def test_cli_require_engines_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    if detect().available:
        pytest.skip("TensorRT and a GPU are present")
    assert _run("--require-engines") == 2
    assert "skipped TensorRT plans" in capsys.readouterr().err


def test_pipeline_step_logs_the_skip_and_goes_on(tmp_path: Path) -> None:
    from builder.cache import StageCache
    from builder.pipeline import BuildContext, ModelBuild
    from builder.spec import load_spec

    if detect().available:
        pytest.skip("TensorRT and a GPU are present")
    lines: list[str] = []
    spec = load_spec(ROOT / "models.yaml")
    ctx = BuildContext(
        spec, ROOT / "models.yaml", ROOT, "gpu", StageCache(tmp_path, lines.append), lines.append
    )
    builds = [ModelBuild(m) for m in spec.models]
    engines = build_all(builds, ctx, require=False)
    assert len(lines) == 1 and "simple (fp32)" in lines[0]
    assert engines.install("resnet18", tmp_path / "resnet18") == {}
    with pytest.raises(EnginesRequired):
        build_all(builds, ctx, require=True)
