"""`tritonforge perf` against every model of the default zoo, served for real (short settings)."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import pytest

from builder.cli import perf as perf_cli
from builder.perf_inputs import core_model
from builder.server import TritonServer
from builder.spec import load_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = Path(__file__).parents[3] / "models.yaml"
MODELS = [m.name for m in load_spec(SPEC).all_models()]
# The sweep (a row per concurrency) is the same code for every model: the first model runs it,
# the rest run concurrency 1 (each level is three measurement windows of a second or more).
SWEPT = MODELS[0]


def _perf(argv: list[str]) -> int:
    root = argparse.ArgumentParser()
    perf_cli.add_parser(root.add_subparsers(dest="command"))
    args = root.parse_args(["perf", *argv])
    return int(args.func(args))


@pytest.mark.parametrize("model", MODELS)
def test_perf_every_zoo_model(model: str, triton: TritonServer, tmp_path: Path, perf_analyzer: str) -> None:
    levels = [1, 2] if model == SWEPT else [1]
    argv = [model, "--spec", str(SPEC), "--url", triton.http_url, "--metrics-url", triton.metrics_url,
            "--concurrency", ",".join(map(str, levels)), "--request-count", "20",
            "--stability-percentage", "75", "--out", str(tmp_path)]  # fmt: skip
    assert _perf(argv) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / f"{model}.csv").read_text())))
    assert [float(r["value"]) for r in rows] == levels and all(float(r["throughput"]) > 0 for r in rows)
    report = json.loads((tmp_path / f"{model}.json").read_text())
    assert all(p["p99_ms"] > 0 for p in report["points"])
    assert report["points"][0]["server_requests"] >= 20  # Prometheus saw this model's requests
    assert (tmp_path / f"{model}.png").read_bytes()[:4] == b"\x89PNG"
    spec = load_spec(SPEC)
    entry = next(m for m in spec.all_models() if m.name == model)
    dynamic = {t.name for t in entry.inputs if t.dynamic}
    shaped = set(report["shapes"])
    if report["input_data"]:
        shaped |= set(json.loads(Path(report["input_data"]).read_text())["data"][0])
    assert dynamic <= shaped  # every dynamic input had a shape from the spec or the real data
    if any(t.dtype.value == "STRING" for t in entry.inputs) and core_model(spec, entry):
        assert report["input_data"], "STRING inputs are fed real calibration data"
