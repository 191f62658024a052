"""An INT8 calibrator that only hands TensorRT 10 an existing calibration table.

The table comes from the CPU calibration stage (TensorRT's text format), so no
batches are ever fed: ``get_batch`` says there are none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorrt as trt


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
