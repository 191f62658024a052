"""The CPU memory estimate against the real server's resident memory (tritonserver + stubs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.estimate.compare import plan
from builder.estimate.rss import measure
from builder.spec import load_spec
from builder.tune.measure import build_local

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.integration
SPEC = """\
models:
  - name: simple
    source: zoo.simple:build
    inputs:
      - {name: INPUT0, dtype: INT32, dims: [16]}
      - {name: INPUT1, dtype: INT32, dims: [16]}
    outputs:
      - {name: OUTPUT0, dtype: INT32, dims: [16]}
      - {name: OUTPUT1, dtype: INT32, dims: [16]}
    max_batch_size: 8
    precisions: [fp32]
    evaluation: {reader: zoo.simple:evaluation_samples}
    tolerances:
      fp32: {exact: true}
"""


def test_cpu_estimate_within_25_percent_of_measured_rss(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    spec_file.write_text(SPEC)
    (tmp_path / "zoo").symlink_to(ROOT / "zoo")
    repo = build_local(spec_file, tmp_path / "repo", log=lambda _: None)
    spec = load_spec(spec_file)
    rows = plan(spec, repo)
    baseline, measured = measure(repo, {"simple": spec.model("simple")}, settle_s=0.5)
    assert baseline > 0
    (m,) = measured
    assert m.server > 0 and m.stubs > 0  # the stub is a separate process, counted
    row = next(r for r in rows if r.model == "simple" and r.device == "cpu" and r.served)
    error = abs(row.total - m.total) / m.total
    assert error < 0.25, f"estimate {row.total / 2**20:.1f} MiB vs measured {m.total / 2**20:.1f} MiB"
