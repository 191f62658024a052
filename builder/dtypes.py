"""One table of data types: spec / Triton names, numpy and ONNX element types."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from builder.spec import DType

NUMPY: dict[DType, type] = {
    DType.BOOL: np.bool_,
    DType.UINT8: np.uint8,
    DType.INT8: np.int8,
    DType.INT16: np.int16,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
    DType.FP16: np.float16,
    DType.FP32: np.float32,
    DType.FP64: np.float64,
    DType.STRING: np.object_,
}

ONNX: dict[DType, int] = {
    DType.BOOL: TensorProto.BOOL,
    DType.UINT8: TensorProto.UINT8,
    DType.INT8: TensorProto.INT8,
    DType.INT16: TensorProto.INT16,
    DType.INT32: TensorProto.INT32,
    DType.INT64: TensorProto.INT64,
    DType.FP16: TensorProto.FLOAT16,
    DType.FP32: TensorProto.FLOAT,
    DType.FP64: TensorProto.DOUBLE,
    DType.STRING: TensorProto.STRING,
}

FROM_ONNX: dict[int, DType] = {v: k for k, v in ONNX.items()}


def to_numpy(dtype: DType) -> np.dtype[Any]:
    return np.dtype(NUMPY[dtype])


def triton_type(dtype: DType) -> str:
    """The config.pbtxt enum name, e.g. ``TYPE_FP32``."""
    return f"TYPE_{dtype.value}"
