"""A sweep's results and the files written from them: CSV, JSON, Markdown, PNG."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clients.perf.errors import PerfError

# perf_analyzer's CSV columns (microseconds) -> our names (milliseconds).
LATENCY_COLUMNS = {"p50 latency": "p50_ms", "p90 latency": "p90_ms", "p95 latency": "p95_ms",
                   "p99 latency": "p99_ms"}  # fmt: skip
CLIENT_SPLIT = {"Server Queue": "pa_queue_ms", "Server Compute Infer": "pa_compute_ms"}


@dataclass
class PerfPoint:
    """One load point: perf_analyzer's numbers and the server's own split for the model."""

    load: str  # "concurrency" or "request_rate"
    value: float
    throughput: float  # inferences per second
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    pa_queue_ms: float  # perf_analyzer's view from the statistics endpoint
    pa_compute_ms: float
    server_queue_ms: float = math.nan  # from Prometheus, per request, this model
    server_compute_ms: float = math.nan
    server_requests: float = math.nan
    server_avg_batch: float = math.nan
    request_count: int = 0  # requests per window and stability threshold of the stable run
    stability_percentage: int = 0
    models: dict[str, dict[str, float]] = field(default_factory=dict)  # every model touched

    @classmethod
    def from_csv_row(cls, load: str, value: float, row: dict[str, float]) -> PerfPoint:
        ms: dict[str, Any] = {
            ours: row.get(col, math.nan) / 1000.0 for col, ours in {**LATENCY_COLUMNS, **CLIENT_SPLIT}.items()
        }
        return cls(load=load, value=value, throughput=row.get("Inferences/Second", math.nan), **ms)


@dataclass
class PerfReport:
    model: str
    url: str
    protocol: str
    batch_size: int
    shapes: dict[str, list[int]]
    input_data: str | None
    settings: dict[str, Any]
    points: list[PerfPoint] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PerfReport:
        points = [PerfPoint(**_nan_for_null(p)) for p in raw["points"]]
        return cls(**{**raw, "points": points})

    @classmethod
    def load(cls, path: Path) -> PerfReport:
        return cls.from_dict(json.loads(Path(path).read_text()))


TABLE = [("load", "{:g}"), ("throughput", "{:.1f}"), ("p50_ms", "{:.2f}"), ("p95_ms", "{:.2f}"),
         ("p99_ms", "{:.2f}"), ("server_queue_ms", "{:.3f}"), ("server_compute_ms", "{:.3f}"),
         ("server_avg_batch", "{:.2f}")]  # fmt: skip
CSV_FIELDS = [
    "load", "value", "throughput", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "pa_queue_ms", "pa_compute_ms",
    "server_queue_ms", "server_compute_ms", "server_requests", "server_avg_batch", "request_count",
    "stability_percentage",
]  # fmt: skip


def write_all(report: PerfReport, out_dir: Path, stem: str | None = None) -> dict[str, str]:
    """Write <stem>.csv/.json/.md/.png into out_dir; return their paths (also kept in the report)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or report.model
    files = {kind: str(out_dir / f"{stem}.{kind}") for kind in ("csv", "json", "md", "png")}
    report.files = files
    write_csv(report, Path(files["csv"]))
    write_markdown(report, Path(files["md"]))
    plot(report, Path(files["png"]))
    write_json(report, Path(files["json"]))
    return files


def write_csv(report: PerfReport, path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for p in report.points:
            writer.writerow(asdict(p))


def write_json(report: PerfReport, path: Path) -> None:
    path.write_text(json.dumps(json_safe(report.to_dict()), indent=2) + "\n")


def markdown(report: PerfReport) -> str:
    load = report.points[0].load if report.points else "concurrency"
    head = [load, "throughput (infer/s)", "p50 ms", "p95 ms", "p99 ms", "server queue ms",
            "server compute ms", "avg batch"]  # fmt: skip
    lines = [
        f"### `{report.model}` (batch {report.batch_size}, {report.protocol})",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for p in report.points:
        cells = [_cell(fmt, p.value if key == "load" else getattr(p, key)) for key, fmt in TABLE]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _steps(report)
    loosened = [
        p for p in report.points if p.stability_percentage > report.settings.get("stability_percentage", 0)
    ]
    if loosened:
        notes = ", ".join(
            f"{p.value:g} ({p.request_count} requests, {p.stability_percentage}%)" for p in loosened
        )
        lines += ["", f"Stabilised only with more requests and a looser threshold: {notes}."]
    if report.shapes:
        lines += ["", "Shapes: " + ", ".join(f"`{k}` {v}" for k, v in report.shapes.items())]
    lines += ["", "Server queue/compute: Triton's Prometheus counters for this model, per request."]
    return "\n".join(lines) + "\n"


def _steps(report: PerfReport) -> list[str]:
    """For an ensemble: queue / compute of each model its requests went through."""
    rows = []
    for p in report.points:
        others = {m: v for m, v in p.models.items() if m != report.model}
        if others:
            parts = [
                f"{m} {v['queue_us'] / 1000:.2f} / {compute_us(v) / 1000:.2f}"
                for m, v in sorted(others.items())
            ]
            rows.append(f"- {p.load} {p.value:g}: " + "; ".join(parts))
    return ["", "Composing models, queue / compute ms per request:", *rows] if rows else []


def compute_us(split: dict[str, float]) -> float:
    parts = (
        split.get("compute_input_us", 0.0),
        split.get("compute_infer_us", 0.0),
        split.get("compute_output_us", 0.0),
    )
    return sum(v for v in parts if v is not None and math.isfinite(v))


def write_markdown(report: PerfReport, path: Path) -> None:
    path.write_text(markdown(report))


def plot(report: PerfReport, path: Path) -> None:
    """Throughput against p99 latency, one labelled point per load level."""
    try:
        import matplotlib  # deferred: the clients alone do not need it
    except ImportError as exc:
        raise PerfError("plots need matplotlib: pip install 'tritonforge-client[perf]'") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    xs = [p.p99_ms for p in report.points]
    ys = [p.throughput for p in report.points]
    ax.plot(xs, ys, marker="o")
    for p in report.points:
        ax.annotate(f"{p.value:g}", (p.p99_ms, p.throughput), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    load = report.points[0].load.replace("_", " ") if report.points else ""
    ax.set_title(f"{report.model}: throughput vs p99 ({load})")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _nan_for_null(point: dict[str, Any]) -> dict[str, Any]:
    return {k: math.nan if v is None else v for k, v in point.items()}


def _cell(fmt: str, value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def json_safe(obj: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_safe(v) for v in obj]
    return obj
