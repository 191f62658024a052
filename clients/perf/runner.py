"""Run perf_analyzer for one load point and parse the CSV it writes."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from clients.perf.errors import PerfError, UnstableError


@dataclass(frozen=True)
class Measurement:
    """perf_analyzer's settings; the defaults stabilise on a noisy 2-core machine."""

    request_count: int = 300  # requests per count window
    stability_percentage: int = 50
    max_trials: int = 10
    retries: int = 2  # on instability: again with 4x the requests, 25 points looser (see api)
    batch_size: int = 1
    protocol: str = "http"  # "http" or "grpc"
    timeout_s: float = 600.0
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def find_perf_analyzer() -> str:
    """``$PERF_ANALYZER``, the project's wrapper beside the running interpreter, then PATH
    (an interpreter of its own, such as the LLM environment's, names the project's with the variable)."""
    named = os.environ.get("PERF_ANALYZER")
    if named:
        if not os.access(named, os.X_OK):
            raise PerfError(f"PERF_ANALYZER={named} is not an executable file")
        return named
    beside = Path(sys.executable).parent / "perf_analyzer"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("perf_analyzer")
    if found:
        return found
    raise PerfError("perf_analyzer not found: run `make tools` (tools/install_perf_analyzer.sh)")


def host_port(url: str) -> str:
    """perf_analyzer's -u wants host:port without a scheme."""
    return url.split("://", 1)[-1].rstrip("/")


def build_command(
    url: str,
    model: str,
    load: tuple[str, float],
    *,
    shapes: dict[str, list[int]],
    input_data: Path | None,
    settings: Measurement,
    csv_path: Path,
) -> list[str]:
    """The perf_analyzer command for one load point: ("concurrency"|"request_rate", value)."""
    kind, value = load
    cmd = [
        find_perf_analyzer(),
        "-m", model,
        "-u", host_port(url),
        "-i", settings.protocol,
        "-b", str(settings.batch_size),
        "--measurement-mode", "count_windows",
        "--measurement-request-count", str(settings.request_count),
        "--stability-percentage", str(settings.stability_percentage),
        "--max-trials", str(settings.max_trials),
        "-f", str(csv_path),
    ]  # fmt: skip
    if kind == "concurrency":
        cmd += ["--concurrency-range", f"{int(value)}:{int(value)}"]
    elif kind == "request_rate":
        cmd += ["--request-rate-range", f"{value:g}:{value:g}"]
    else:
        raise PerfError(f"unknown load kind '{kind}'")
    for name, dims in shapes.items():
        cmd += ["--shape", f"{name}:{','.join(str(d) for d in dims)}"]
    if input_data is not None:
        cmd += ["--input-data", str(input_data)]
    return cmd + list(settings.extra_args)


def run_point(cmd: list[str], csv_path: Path, timeout_s: float) -> dict[str, float]:
    """Run one perf_analyzer command; return the CSV's single row as floats."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PerfError(f"perf_analyzer did not finish within {timeout_s:g} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0 or not csv_path.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        message = f"perf_analyzer failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}"
        if "failed to obtain stable measurement" in tail.lower():
            raise UnstableError(message + "\n(raise --request-count or --stability-percentage)")
        raise PerfError(message)
    rows = parse_csv(csv_path)
    if len(rows) != 1:
        raise PerfError(f"expected one row in {csv_path}, found {len(rows)}")
    return rows[0]


def parse_csv(path: Path) -> list[dict[str, float]]:
    """perf_analyzer's -f CSV: a header row then one row per load point (extra tables ignored)."""
    rows: list[dict[str, float]] = []
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            return rows
        for line in reader:
            if not line or len(line) != len(header):
                break  # a blank line starts the optional metrics table
            rows.append({k.strip(): _num(v) for k, v in zip(header, line, strict=True)})
    return rows


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def scratch_csv() -> Path:
    fd, name = tempfile.mkstemp(prefix="perf_analyzer_", suffix=".csv")
    os.close(fd)
    os.unlink(name)
    return Path(name)
