"""The table ``tritonforge build`` prints: one row per model, the worst figure per variant."""

from __future__ import annotations

from pathlib import Path

from builder.cache import StageResult
from builder.cli.summary import render
from builder.records import BuildResult, ModelBuild, OutputMetrics, VerificationReport
from builder.spec import ModelSpec, Precision, Variant


def model() -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "m", "source": "m.onnx", "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}], "precisions": ["fp32", "int8"],
        "calibration": {"data": "c.npz"}, "evaluation": {"data": "e.npz"},
        "tolerances": {"fp32": {"min_cosine": 0.99}, "int8": {"min_cosine": 0.99}},
    })  # fmt: skip


def test_render_shows_served_variant_worst_metric_and_failures(tmp_path: Path) -> None:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"\0" * 3 * 2**20)
    ok = VerificationReport(
        Variant(Precision.FP32), True, {"y": OutputMetrics(0.99991, 0.9999, 0.01, None, None)}, []
    )
    bad = VerificationReport(
        Variant(Precision.INT8), False, {"y": OutputMetrics(0.9, 0.95, 0.3, None, None)}, ["int8: y"]
    )
    fp32, int8 = Variant(Precision.FP32), Variant(Precision.INT8)
    b = ModelBuild(model(), {fp32: onnx, int8: onnx}, {fp32: ok, int8: bad})
    b.stages = [StageResult("export", "k", tmp_path, True, 1.0, {})]
    b.served = fp32
    text = render(BuildResult("local", tmp_path / "repo", [b], True, 2.5))
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["model", "served"]
    row = lines[2]
    assert row.startswith("m ") and " fp32 " in row
    assert "fp32 ok min cos 0.9999" in row and "3.0 MiB" in row and "unchanged" in row
    assert lines[3].split() == ["int8", "FAILED", "min", "cos", "0.9000"]  # one line per variant
    assert lines[-1] == f"local repository {tmp_path / 'repo'} (published) in 2.5 s"
    assert all(len(line) <= 120 for line in lines)
