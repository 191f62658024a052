"""`tritonforge tune` end to end on the small `simple` model with short perf settings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from builder.cli import tune as cli

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.integration
SPEC = """\
models:
  # Triton's example model: the tuner's smallest real subject.
  - name: simple
    source: zoo.simple:build
    inputs:
      - {name: INPUT0, dtype: INT32, dims: [16]}
      - {name: INPUT1, dtype: INT32, dims: [16]}
    outputs:
      - {name: OUTPUT0, dtype: INT32, dims: [16]}
      - {name: OUTPUT1, dtype: INT32, dims: [16]}
    max_batch_size: 8
    batching:
      queue: {max_queue_size: 256}
    precisions: [fp32]
    evaluation: {reader: zoo.simple:evaluation_samples}
    tolerances:
      fp32: {exact: true}
"""


def test_tune_simple(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    out = tmp_path / "tune"
    spec = tmp_path / "models.yaml"
    spec.write_text(SPEC)
    (tmp_path / "zoo").symlink_to(ROOT / "zoo")
    args = parser.parse_args([
        "tune", "simple", "--p99-ms", "500", "--spec", str(spec), "--out", str(out),
        "--concurrency", "1", "2", "--request-count", "400", "--delays-us", "0", "500",
        "--max-instances", "1", "--budget-minutes", "3", "--no-confirm", "--apply",
    ])  # fmt: skip
    assert args.func(args) == 0
    report = json.loads((out / "tune.json").read_text())
    assert (out / "report.md").is_file() and (out / "throughput_vs_p99.png").stat().st_size > 0
    measured = [t for t in report["trials"] if t["status"] == "measured"]
    assert measured, report["trials"]
    for t in report["trials"]:
        c = t["candidate"]
        assert 1 <= c["max_batch_size"] <= 8  # the profile
        # --max-instances bounds the counts tried; the build's own sizing is the baseline, measured
        # as it is, and where it keeps the lead the later dimensions are tried at its count.
        assert c["instances"] in {1, report["default"]["candidate"]["instances"]}
        assert c["max_queue_delay_us"] in (0, 500)
        inside = all(s <= c["max_batch_size"] for s in c["preferred_batch_sizes"])
        assert inside or (t["status"] == "pruned" and "outside" in t["reason"]), t  # never measured
    assert any(t["status"] == "pruned" for t in report["trials"])  # equivalent candidates skipped
    assert report["seconds"] < 3 * 60
    chosen = report["chosen"]["candidate"]
    text = spec.read_text()
    if report["chosen"]["label"] != report["default"]["label"]:
        assert (out / "models.yaml.diff").is_file()
        assert "# Triton's example model" in text  # applied, comments kept
        assert f"max_batch_size: {chosen['max_batch_size']}" in text
    assert "chosen:" in capsys.readouterr().out
