"""perf_analyzer for real against a served ad-hoc repository: shapes, real data, reports, gate."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from builder.server import TritonServer
from clients.perf import (
    Measurement,
    PerfError,
    PerfReport,
    bytes_entries,
    run_perf,
    string_entries,
    write_input_data,
)
from clients.perf.cli import main

pytestmark = pytest.mark.integration

SHORT = Measurement(request_count=30, stability_percentage=50, max_trials=10)


def _short_cli(server: TritonServer, model: str, out: Path, *extra: str) -> list[str]:
    return [model, "--url", server.http_url, "--metrics-url", server.metrics_url,
            "--request-count", "30", "--out", str(out), *extra]  # fmt: skip


def _check_files(report: PerfReport, points: int) -> None:
    rows = list(csv.DictReader(io.StringIO(Path(report.files["csv"]).read_text())))
    assert len(rows) == points and all(float(r["throughput"]) > 0 for r in rows)
    raw = json.loads(Path(report.files["json"]).read_text())
    assert PerfReport.from_dict(raw).points[0].p99_ms > 0
    assert Path(report.files["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = Path(report.files["md"]).read_text()
    assert "p99 ms | server queue ms | server compute ms" in table
    assert table.count("\n| ") == points + 1  # header + one row per point


def test_dynamic_dims_need_and_get_shapes(adhoc: TritonServer, tmp_path: Path) -> None:
    with pytest.raises(PerfError, match=r"inputs 'INPUT0' .* 'INPUT1' .*--shape INPUT0:N"):
        run_perf(adhoc.http_url, "dyn_add", concurrency=[1], out_dir=tmp_path, settings=SHORT)
    report = run_perf(
        adhoc.http_url, "dyn_add", shapes={"INPUT0": [24], "INPUT1": [24]}, concurrency=[1, 2],
        out_dir=tmp_path, metrics_url=adhoc.metrics_url, settings=SHORT,
    )  # fmt: skip
    _check_files(report, points=2)
    assert report.shapes == {"INPUT0": [24], "INPUT1": [24]}
    first = report.points[0]
    assert first.server_requests >= 30 and first.server_compute_ms > 0 and first.server_queue_ms >= 0
    assert set(first.models) == {"dyn_add"}


def test_shape_of_wrong_rank_is_refused(adhoc: TritonServer, tmp_path: Path) -> None:
    with pytest.raises(PerfError, match="does not fit its dims"):
        run_perf(adhoc.http_url, "dyn_add", shapes={"INPUT0": [2, 3], "INPUT1": [6]}, out_dir=tmp_path)


def test_sentences_as_input_data_are_validated(adhoc: TritonServer, tmp_path: Path) -> None:
    texts = ["the quick brown fox", "hello world", "one"]
    data = write_input_data(
        string_entries("TEXT", texts), tmp_path / "text.json",
        validation=[{"WORDS": [len(t.split())]} for t in texts],
    )  # fmt: skip
    report = run_perf(adhoc.http_url, "text_len", concurrency=[1], input_data=data, out_dir=tmp_path,
                      metrics_url=adhoc.metrics_url, settings=SHORT)  # fmt: skip
    assert report.points[0].throughput > 0 and report.input_data == str(data)


def test_images_as_input_data_are_decoded_by_the_model(adhoc: TritonServer, tmp_path: Path) -> None:
    sizes = [(40, 30), (17, 64)]
    blobs = []
    for (w, h), fmt in zip(sizes, ("JPEG", "PNG"), strict=True):
        buf = io.BytesIO()
        Image.new("RGB", (w, h), (200, 10, 10)).save(buf, format=fmt)
        blobs.append(buf.getvalue())
    data = write_input_data(bytes_entries("IMAGE", blobs), tmp_path / "img.json",
                            validation=[{"SIZE": [float(w), float(h)]} for w, h in sizes])  # fmt: skip
    report = run_perf(adhoc.http_url, "image_size", concurrency=[1], input_data=data, out_dir=tmp_path,
                      settings=SHORT)  # fmt: skip
    assert report.points[0].throughput > 0


def test_wrong_expected_output_fails_the_run(adhoc: TritonServer, tmp_path: Path) -> None:
    data = write_input_data(string_entries("TEXT", ["two words"]), tmp_path / "bad.json",
                            validation=[{"WORDS": [5]}])  # fmt: skip
    with pytest.raises(PerfError, match="perf_analyzer failed"):
        run_perf(
            adhoc.http_url, "text_len", concurrency=[1], input_data=data, out_dir=tmp_path, settings=SHORT
        )


def test_request_rate_sweep(adhoc: TritonServer, tmp_path: Path) -> None:
    report = run_perf(adhoc.http_url, "dyn_add", shapes={"INPUT0": [4], "INPUT1": [4]},
                      request_rate=[50, 100], out_dir=tmp_path, settings=SHORT)  # fmt: skip
    _check_files(report, points=2)
    assert [p.load for p in report.points] == ["request_rate", "request_rate"]
    assert [p.value for p in report.points] == [50, 100]


def test_cli_baseline_gate(adhoc: TritonServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shapes = ["--shape", "INPUT0:8", "--shape", "INPUT1:8", "--concurrency", "1"]
    assert main(_short_cli(adhoc, "dyn_add", tmp_path / "a", *shapes)) == 0
    baseline = tmp_path / "a" / "dyn_add.json"
    assert "| concurrency |" in capsys.readouterr().out
    # The gate's verdict without depending on what this run measured: a baseline no run can fall
    # below passes, one no run can reach fails on both throughput and p99, exit 1.
    raw = json.loads(baseline.read_text())
    assert raw["points"][0]["throughput"] > 0 and raw["points"][0]["p99_ms"] > 0
    assert (
        main(
            _short_cli(
                adhoc,
                "dyn_add",
                tmp_path / "b",
                *shapes,
                "--baseline",
                str(_with(raw, 1e-30, 1e30, tmp_path / "slow.json")),
            )
        )
        == 0
    )
    fast = _with(raw, 1e30, 1e-30, tmp_path / "fast.json")
    assert main(_short_cli(adhoc, "dyn_add", tmp_path / "c", *shapes, "--baseline", str(fast))) == 1
    err = capsys.readouterr().err
    assert "REGRESSION concurrency 1: throughput" in err and "p99" in err


def _with(raw: dict, throughput: float, p99_ms: float, path: Path) -> Path:
    """``raw`` with its first point's throughput and p99 replaced, written to ``path``."""
    point = {**raw["points"][0], "throughput": throughput, "p99_ms": p99_ms}
    path.write_text(json.dumps({**raw, "points": [point, *raw["points"][1:]]}))
    return path


def test_cli_missing_shape_is_a_clear_error(adhoc: TritonServer, tmp_path: Path, capsys) -> None:
    assert main(_short_cli(adhoc, "dyn_add", tmp_path, "--concurrency", "1")) == 2
    assert "--shape INPUT0:N --shape INPUT1:N" in capsys.readouterr().err
