"""Triton's standard example model ``simple``: two INT32 [batch, 16] inputs, their sum and difference.

Triton's own example clients (``simple_grpc_infer_client.py`` and friends) work against it unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, helper

WIDTH = 16
OPSET = 17
IR_VERSION = 8  # the oldest IR that opset 17 allows: loads in older ONNX Runtime builds too
SEED = 20240501
SAMPLES = 64


def _tensor(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", WIDTH])


def build() -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, batch dim dynamic and named ``batch``."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        "simple",
        [_tensor("INPUT0"), _tensor("INPUT1")],
        [_tensor("OUTPUT0"), _tensor("OUTPUT1")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritonforge"
    )
    model.ir_version = IR_VERSION
    return model


def evaluation_samples(path: Path | None = None) -> dict[str, NDArray[np.int32]]:
    """Fixed-seed INT32 samples; ``path`` is unused (the spec gives no data file)."""
    rng = np.random.default_rng(SEED)
    # Small magnitudes: sums and differences stay far from INT32 overflow.
    shape = (SAMPLES, WIDTH)
    return {
        "INPUT0": rng.integers(-1000, 1000, size=shape, dtype=np.int32),
        "INPUT1": rng.integers(-1000, 1000, size=shape, dtype=np.int32),
    }
