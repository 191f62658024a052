"""run_perf: sweep one served model with perf_analyzer and write its report."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from clients.perf import metrics
from clients.perf.errors import PerfError, UnstableError
from clients.perf.inputs import resolve_shapes, served_model
from clients.perf.report import PerfPoint, PerfReport, compute_us, write_all
from clients.perf.runner import Measurement, build_command, run_point


def run_perf(
    url: str,
    model: str,
    *,
    shapes: dict[str, list[int]] | None = None,
    concurrency: Sequence[int] = (1, 2, 4),
    request_rate: Sequence[float] | None = None,
    input_data: Path | None = None,
    out_dir: Path,
    metrics_url: str | None = None,
    settings: Measurement | None = None,
    stem: str | None = None,
) -> PerfReport:
    """One perf_analyzer run per load point (concurrency, or request rate when given),
    with the server's Prometheus counters scraped around each; writes CSV/JSON/MD/PNG."""
    settings = settings or Measurement()
    served = served_model(url, model, settings.protocol)
    if served.max_batch_size and settings.batch_size > served.max_batch_size:
        raise PerfError(f"batch size {settings.batch_size} is above {model}'s max_batch_size "
                        f"{served.max_batch_size}")  # fmt: skip
    dynamic = resolve_shapes(served, shapes, input_data)
    loads = (
        [("request_rate", float(r)) for r in request_rate]
        if request_rate
        else [("concurrency", float(c)) for c in concurrency]
    )
    if not loads:
        raise PerfError("give at least one concurrency or request rate")
    report = PerfReport(
        model=model, url=url, protocol=settings.protocol, batch_size=settings.batch_size, shapes=dynamic,
        input_data=str(input_data) if input_data else None,
        settings={"measurement_mode": "count_windows", "request_count": settings.request_count,
                  "stability_percentage": settings.stability_percentage, "max_trials": settings.max_trials},
    )  # fmt: skip
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for load in loads:
        report.points.append(_measure(url, model, load, dynamic, input_data, settings, metrics_url, out_dir))
    write_all(report, out_dir, stem)
    return report


def _measure(
    url: str,
    model: str,
    load: tuple[str, float],
    shapes: dict[str, list[int]],
    input_data: Path | None,
    settings: Measurement,
    metrics_url: str | None,
    out_dir: Path,
) -> PerfPoint:
    raw = out_dir / "raw"
    raw.mkdir(exist_ok=True)
    csv_path = raw / f"{model}_{load[0]}_{load[1]:g}.csv"
    csv_path.unlink(missing_ok=True)
    before = metrics.scrape(metrics_url) if metrics_url else {}
    row, used = _stable_run(url, model, load, shapes, input_data, settings, csv_path)
    point = PerfPoint.from_csv_row(load[0], load[1], row)
    point.request_count, point.stability_percentage = used.request_count, used.stability_percentage
    if metrics_url:
        moved = metrics.delta(before, metrics.scrape(metrics_url))
        point.models = {name: c.per_request() for name, c in moved.items()}
        own = point.models.get(model)
        if own:
            point.server_queue_ms = own["queue_us"] / 1000.0
            point.server_compute_ms = compute_us(own) / 1000.0
            point.server_requests = own["requests"]
            point.server_avg_batch = own["avg_batch"]
    return point


def _stable_run(
    url: str,
    model: str,
    load: tuple[str, float],
    shapes: dict[str, list[int]],
    input_data: Path | None,
    settings: Measurement,
    csv_path: Path,
) -> tuple[dict[str, float], Measurement]:
    """Run until stable; after each unstable attempt use 4x the requests per window and a
    stability threshold 25 points looser (both recorded with the point)."""
    for attempt in range(settings.retries + 1):
        current = dataclasses.replace(
            settings,
            request_count=settings.request_count * 4**attempt,
            stability_percentage=min(settings.stability_percentage + 25 * attempt, 100),
        )
        cmd = build_command(url, model, load, shapes=shapes, input_data=input_data, settings=current,
                            csv_path=csv_path)  # fmt: skip
        try:
            return run_point(cmd, csv_path, settings.timeout_s), current
        except UnstableError:
            if attempt == settings.retries:
                raise
    raise AssertionError("unreachable")
