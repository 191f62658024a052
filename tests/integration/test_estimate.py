"""The CPU memory estimate against the real server's resident memory (tritonserver + stubs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.estimate.cli import plan
from builder.estimate.rss import measure
from builder.spec import load_spec

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.integration


def test_cpu_estimate_within_25_percent_of_measured_rss(zoo_repo: Path) -> None:
    spec = load_spec(ROOT / "models.yaml")
    rows = plan(spec, zoo_repo)
    baseline, measured = measure(zoo_repo, {"simple": spec.model("simple")}, settle_s=0.5)
    assert baseline > 0
    (m,) = measured
    assert m.server > 0 and m.stubs > 0  # the stub is a separate process, counted
    row = next(r for r in rows if r.model == "simple" and r.device == "cpu" and r.served)
    error = abs(row.total - m.total) / m.total
    assert error < 0.25, f"estimate {row.total / 2**20:.1f} MiB vs measured {m.total / 2**20:.1f} MiB"
