"""The parts of the perf wrapper that need no server: metrics text, CSV, baseline, arguments."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from clients.perf import Margins, PerfError, PerfPoint, PerfReport, compare
from clients.perf.cli import parse_shape
from clients.perf.metrics import delta, metrics_endpoint, parse
from clients.perf.runner import parse_csv

METRICS = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="1"} 10
nv_inference_request_success{model="idle",version="1"} 3
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 0
nv_inference_count{model="m",version="1"} 10
nv_inference_exec_count{model="m",version="1"} 5
nv_inference_queue_duration_us{model="m",version="1"} 1000
nv_inference_compute_infer_duration_us{model="m",version="1"} 4000
nv_cpu_utilization 0.5
"""


def test_metrics_delta_per_request() -> None:
    before = parse(METRICS)
    moved_text = METRICS.replace("} 10\n", "} 30\n").replace("} 5\n", "} 15\n")
    after = parse(moved_text.replace("} 1000", "} 3000").replace("} 4000", "} 9000"))
    moved = delta(before, after)
    assert set(moved) == {"m"}  # "idle" did not move
    split = moved["m"].per_request()
    assert split["requests"] == 20 and split["queue_us"] == 100 and split["compute_infer_us"] == 250
    assert split["avg_batch"] == 2.0


def test_metrics_endpoint_forms() -> None:
    assert metrics_endpoint("127.0.0.1:8002") == "http://127.0.0.1:8002/metrics"
    assert metrics_endpoint("http://h:1/metrics") == "http://h:1/metrics"


def test_parse_perf_analyzer_csv(tmp_path: Path) -> None:
    path = tmp_path / "pa.csv"
    path.write_text(
        "Concurrency,Inferences/Second,Server Queue,p50 latency,p99 latency\n2,100.5,30,900,1500\n\n"
        "Concurrency,metric\n2,x\n"
    )
    assert parse_csv(path) == [
        {"Concurrency": 2, "Inferences/Second": 100.5, "Server Queue": 30, "p50 latency": 900,
         "p99 latency": 1500}
    ]  # fmt: skip
    point = PerfPoint.from_csv_row("concurrency", 2, parse_csv(path)[0])
    assert point.p99_ms == 1.5 and point.pa_queue_ms == 0.03 and math.isnan(point.p95_ms)


def _report(throughput: float, p99: float, model: str = "m") -> PerfReport:
    point = PerfPoint(load="concurrency", value=1, throughput=throughput, p50_ms=1, p90_ms=1, p95_ms=1,
                      p99_ms=p99, pa_queue_ms=0, pa_compute_ms=0)  # fmt: skip
    return PerfReport(model, "u", "http", 1, {}, None, {}, points=[point])


def test_baseline_margins() -> None:
    base = _report(100, 10)
    assert compare(_report(95, 11), base) == []
    problems = compare(_report(80, 13), base, Margins(throughput_drop=0.1, p99_rise=0.2))
    assert len(problems) == 2 and "fell below 100.0/s by 20.0%" in problems[0] and "rose" in problems[1]
    with pytest.raises(PerfError, match="not 'm'"):
        compare(_report(1, 1), _report(1, 1, model="other"))


def test_report_round_trips_through_json(tmp_path: Path) -> None:
    from clients.perf.report import write_json

    report = _report(100, 10)
    write_json(report, tmp_path / "r.json")
    again = PerfReport.load(tmp_path / "r.json")
    assert again.points[0].throughput == 100 and math.isnan(again.points[0].server_queue_ms)


def test_parse_shape() -> None:
    assert parse_shape("input_ids:128") == ("input_ids", [128])
    assert parse_shape("ns:x:3,224,224") == ("ns:x", [3, 224, 224])
    for bad in ("noshape", "x:", "x:0", "x:a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_shape(bad)
