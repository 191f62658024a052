"""The calibration table TensorRT 10's calibrator hands over, under the right header.

The table comes from the CPU calibration stage (TensorRT's text format) and is the
cache of Polygraphy's ``Calibrator``, which feeds no batches (trt_loader.table_calibrator).
TensorRT uses a cache only if its first line is the header that TensorRT version
writes; otherwise it calibrates, gets no batch, and the build fails. So the header is
written here, from the TensorRT that reads the table.
"""

from __future__ import annotations


def calibration_header(tensorrt_version: str) -> str:
    """``TRT-<NV_TENSORRT_VERSION>-EntropyCalibration2``; since TensorRT 10 that number is
    major * 10000 + minor * 100 + patch (10.13.3 -> 101303)."""
    major, minor, patch = (int(part) for part in [*tensorrt_version.split("."), "0", "0"][:3])
    return f"TRT-{major * 10000 + minor * 100 + patch}-EntropyCalibration2"


def with_header(table: bytes, tensorrt_version: str) -> bytes:
    """The table with its first line replaced by this TensorRT version's header."""
    _, _, body = table.partition(b"\n")
    return calibration_header(tensorrt_version).encode() + b"\n" + body
