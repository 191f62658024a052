"""Triton's data types, as the spec writes them."""

from __future__ import annotations

from enum import Enum


class DType(str, Enum):
    """Triton's data types, as written in config.pbtxt without the TYPE_ prefix."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    STRING = "STRING"

    @property
    def is_float(self) -> bool:
        return self in (DType.FP16, DType.FP32, DType.FP64)
