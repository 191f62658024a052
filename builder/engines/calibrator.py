"""An INT8 calibrator that only hands TensorRT 10 an existing calibration table.

The table comes from the CPU calibration stage (TensorRT's text format), so no
batches are ever fed: ``get_batch`` says there are none. TensorRT uses a cache only
if its first line is the header that TensorRT version writes; otherwise it
calibrates with ``get_batch``, gets nothing, and the build fails. So the header is
written here, from the TensorRT that reads the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorrt as trt


def calibration_header(tensorrt_version: str) -> str:
    """``TRT-<NV_TENSORRT_VERSION>-EntropyCalibration2``; since TensorRT 10 that number is
    major * 10000 + minor * 100 + patch (10.13.3 -> 101303)."""
    major, minor, patch = (int(part) for part in [*tensorrt_version.split("."), "0", "0"][:3])
    return f"TRT-{major * 10000 + minor * 100 + patch}-EntropyCalibration2"


def with_header(table: bytes, tensorrt_version: str) -> bytes:
    """The table with its first line replaced by this TensorRT version's header."""
    _, _, body = table.partition(b"\n")
    return calibration_header(tensorrt_version).encode() + b"\n" + body


def table_calibrator(table: bytes) -> trt.IInt8Calibrator:
    import tensorrt as trt

    class TableCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            super().__init__()

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names: list[str]) -> list[int]:
            return []  # no data: TensorRT uses the table, or fails if the table does not fit

        def read_calibration_cache(self) -> bytes:
            return table

        def write_calibration_cache(self, cache: object) -> None:
            return None

    return TableCalibrator()
