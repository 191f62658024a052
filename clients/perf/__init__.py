"""perf_analyzer, wrapped: shapes checked, sweeps measured, reports written, regressions gated.

from clients.perf import run_perf
report = run_perf("127.0.0.1:8000", "simple", concurrency=[1, 2, 4], out_dir=Path("perf"),
                  metrics_url="127.0.0.1:8002")
"""

from clients.perf.api import run_perf
from clients.perf.baseline import Margins, check, compare
from clients.perf.errors import PerfError
from clients.perf.inputs import (
    ServedInput,
    ServedModel,
    array_entries,
    bytes_entries,
    resolve_shapes,
    served_model,
    string_entries,
    write_input_data,
)
from clients.perf.report import PerfPoint, PerfReport
from clients.perf.runner import Measurement, find_perf_analyzer

__all__ = [
    "Margins",
    "Measurement",
    "PerfError",
    "PerfPoint",
    "PerfReport",
    "ServedInput",
    "ServedModel",
    "array_entries",
    "bytes_entries",
    "check",
    "compare",
    "find_perf_analyzer",
    "resolve_shapes",
    "run_perf",
    "served_model",
    "string_entries",
    "write_input_data",
]
