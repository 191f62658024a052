"""The fp16 stage: float16 weights and compute, FP32 inputs and outputs kept."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from numpy.typing import NDArray
from onnxconverter_common import float16

from builder.errors import ModelRefused
from builder.stages.base import GRAPH, Info, ModelJob, Stage, StageInputs, artifact
from builder.stages.check import CHECK
from builder.stages.runtimes import ort_session


class Fp16Inputs(StageInputs):
    STAGE = "fp16"
    TOOLS = ("onnx", "onnxconverter-common")
    CODE = ("builder.stages.fp16",)
    checked_sha256: str


class Fp16(Stage):
    name = Fp16Inputs.STAGE

    def inputs(self, job: ModelJob) -> Fp16Inputs:
        return Fp16Inputs(checked_sha256=job.sha256(CHECK.name))

    def run(self, job: ModelJob, out: Path) -> Info:
        return artifact(convert_fp16(job.graph(CHECK.name), out / GRAPH))


FP16 = Fp16()

_PROBE_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def convert_fp16(fp32_onnx: Path, out: Path) -> Path:
    """Convert with onnxconverter-common (keep_io_types) and check ORT CPU loads and runs it."""
    model = onnx.load(str(fp32_onnx))
    with warnings.catch_warnings():
        # One warning per weight below FP16's range; the variant is verified against the source anyway.
        warnings.simplefilter("ignore", UserWarning)
        half = float16.convert_float_to_float16(model, keep_io_types=True)
        half = _casts_match_their_outputs(_outputs_read_before_their_cast(half))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    onnx.save(half, str(tmp))
    try:
        _check_runs(tmp, fp32_onnx)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return out


def _outputs_read_before_their_cast(model: onnx.ModelProto) -> onnx.ModelProto:
    """keep_io_types casts a float output back to FLOAT at the end, but nodes that also read that
    output (a graph returning a tensor and something computed from it) keep reading the FLOAT name
    beside FLOAT16 operands, which ONNX Runtime refuses: they are made to read the FLOAT16 tensor."""
    outputs = {o.name for o in model.graph.output}
    casts = {
        node.output[0]: node.input[0]
        for node in model.graph.node
        if node.op_type == "Cast"
        and node.output[0] in outputs
        and node.name.endswith(f"_cast_to_{node.output[0]}")
    }
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output and node.output[0] in casts:
            continue
        for i, name in enumerate(node.input):
            if name in casts:
                node.input[i] = casts[name]
    return model


def _casts_match_their_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The converter types a ``Cast(to=FLOAT)``'s output FLOAT16 (a Cast of an integer input, say)
    but leaves ``to`` as it was, which ONNX Runtime refuses: such a Cast is made to cast to FLOAT16."""
    half = {
        v.name for v in model.graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    }
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in half:
            for attr in node.attribute:
                if attr.name == "to" and attr.i == onnx.TensorProto.FLOAT:
                    attr.i = onnx.TensorProto.FLOAT16
    return model


def _check_runs(path: Path, fp32_onnx: Path) -> None:
    try:
        session = ort_session(path)
    except Exception as exc:  # ORT raises its own exception types for invalid graphs
        raise ModelRefused(
            f"{fp32_onnx.name}: fp16: ONNX Runtime cannot load the converted model: {exc}"
        ) from exc
    feed = _probe(session)
    if feed is None:
        return
    try:
        session.run(None, feed)
    except Exception as exc:
        if _runs(fp32_onnx, feed):  # the probe suits the model, so the conversion broke it
            raise ModelRefused(f"{fp32_onnx.name}: fp16: the converted model fails to run: {exc}") from exc


def _probe(session: ort.InferenceSession) -> dict[str, NDArray[Any]] | None:
    """Small ones for every input (dynamic dims as 1), or None for unsupported input types."""
    feed = {}
    for arg in session.get_inputs():
        dtype = _PROBE_TYPES.get(arg.type)
        if dtype is None:
            return None
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        feed[arg.name] = np.ones(shape, dtype=dtype)
    return feed


def _runs(path: Path, feed: dict[str, NDArray[Any]]) -> bool:
    try:
        ort_session(path).run(None, feed)
    except Exception:
        return False
    return True
