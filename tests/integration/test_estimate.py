"""The CPU memory estimate against the real server's resident memory (tritonserver + stubs), for
each published variant as the build serves it: on its runtime, at the instances the build chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.estimate.compare import compare, plan
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
    serve: {runtime: openvino}  # served on OpenVINO, published on ONNX Runtime too: both measured
"""


def test_cpu_estimate_within_25_percent_of_measured_rss(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    spec_file.write_text(SPEC)
    (tmp_path / "zoo").symlink_to(ROOT / "zoo")
    repo = build_local(spec_file, tmp_path / "repo", log=lambda _: None)
    spec = load_spec(spec_file)
    rows = plan(spec, repo)
    results = compare(rows, repo, spec)
    assert {r["variant"] for r in results} == {"fp32_openvino", "fp32"}
    for r in results:
        assert r["empty_server_mib"] > 0 and r["server_mib"] > 0
        assert r["stubs_mib"] > 0  # the stub is a separate process, counted
        assert abs(r["error_pct"]) < 25, r
