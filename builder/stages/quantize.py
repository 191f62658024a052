"""INT8 variants: static explicit Q/DQ (TensorRT-compatible) and ORT dynamic (CPU only).

Static quantization calibrates once: the ranges computed here feed both the Q/DQ
model (through ORT's calibration cache) and the TensorRT calibration table.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.calibrate import TensorsData, create_calibrator, save_tensors_data
from onnxruntime.quantization.shape_inference import quant_pre_process

from builder.errors import BuildError, SpecError
from builder.progress import progress, quiet
from builder.spec import Calibration, ModelSpec
from builder.spec import CalibrationMethod as SpecMethod

# Header of TensorRT's calibration cache text format; TensorRT skips a cache it cannot use.
TRT_CACHE_HEADER = "TRT-8600-EntropyCalibration2"
CALIBRATION_BATCH_CAP = 16
# Samples per calibrator pass: bounds the intermediate outputs held in memory at once
# (ORT keeps every intermediate tensor of a pass; about 10 MB a sample for resnet18).
SAMPLES_PER_PASS = 32
LOG_FILE = "int8.log"  # what ONNX Runtime's calibration prints, beside the variant

_METHODS = {
    SpecMethod.MINMAX: CalibrationMethod.MinMax,
    SpecMethod.ENTROPY: CalibrationMethod.Entropy,
    SpecMethod.PERCENTILE: CalibrationMethod.Percentile,
}
_DYNAMIC_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"}
_SYMMETRIC = {"ActivationSymmetric": True, "WeightSymmetric": True}


@dataclass(frozen=True)
class QuantizeResult:
    onnx: Path
    calibration_table: Path | None  # TensorRT-format calibration table from the same ranges


class SampleReader(CalibrationDataReader):
    """Feeds samples in batches; with ``batch == 0`` one sample at a time, without a batch axis."""

    def __init__(self, samples: dict[str, np.ndarray], batch: int, start: int = 0, stop: int | None = None):
        self.samples = samples
        self.batch = batch
        self.count = next(iter(samples.values())).shape[0]
        self.start = start
        self.stop = self.count if stop is None else min(stop, self.count)
        self._it = self._batches()

    def _batches(self) -> Iterator[dict[str, np.ndarray]]:
        step = max(self.batch, 1)
        for i in range(self.start, self.stop, step):
            if self.batch == 0:
                yield {k: v[i] for k, v in self.samples.items()}
            else:
                yield {k: v[i : i + step] for k, v in self.samples.items()}

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def __len__(self) -> int:
        return len(range(self.start, self.stop, max(self.batch, 1)))


def calibration_batch(model: ModelSpec) -> int:
    return min(model.max_batch_size, CALIBRATION_BATCH_CAP)


def quantize_int8(
    model: ModelSpec, fp32_onnx: Path, samples: dict[str, np.ndarray], out_dir: Path
) -> QuantizeResult:
    """Static INT8 with symmetric explicit Q/DQ; also writes a TensorRT calibration table."""
    cal = model.calibration
    if cal is None:
        raise SpecError("int8 needs calibration data", model=model.name, field="calibration")
    out_dir.mkdir(parents=True, exist_ok=True)
    out, table = out_dir / "int8.onnx", out_dir / "int8.calibration.cache"
    with tempfile.TemporaryDirectory(prefix="quant.", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        _load_in_ort(fp32_onnx, model.name, "fp32")
        pre = _pre_process(fp32_onnx, tmp)
        ranges = _calibrate(pre, cal, samples, calibration_batch(model), tmp)
        cache = tmp / "ranges.json"
        save_tensors_data(ranges, cache)
        quantize_static(
            str(pre),
            str(tmp / "int8.onnx"),
            calibration_data_reader=None,  # ranges come from the cache: one calibration pass
            quant_format=QuantFormat.QDQ,
            per_channel=cal.per_channel,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=_excluded_nodes(model, cal, fp32_onnx, pre),
            op_types_to_quantize=cal.op_types or None,
            calibrate_method=_METHODS[cal.method],
            extra_options=dict(_SYMMETRIC),
            calibration_cache_path=str(cache),
        )
        _check_static(tmp / "int8.onnx", model.name)
        write_trt_table(ranges, tmp / "table", activation_scales(tmp / "int8.onnx"))
        os.replace(tmp / "int8.onnx", out)
        os.replace(tmp / "table", table)
    return QuantizeResult(onnx=out, calibration_table=table)


def quantize_int8_dynamic(model: ModelSpec, fp32_onnx: Path, out_dir: Path) -> Path:
    """ORT dynamic INT8 (weights per channel, QInt8; activations quantized at run time)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "int8_dynamic.onnx"
    with tempfile.TemporaryDirectory(prefix="quant.", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        _load_in_ort(fp32_onnx, model.name, "fp32")
        pre = _pre_process(fp32_onnx, tmp)
        quantize_dynamic(str(pre), str(tmp / "q.onnx"), per_channel=True, weight_type=QuantType.QInt8)
        _load_in_ort(tmp / "q.onnx", model.name, "int8_dynamic")
        if not _has_op_in(onnx.load(str(tmp / "q.onnx")).graph, _DYNAMIC_OPS):
            raise BuildError(f"model '{model.name}': int8_dynamic: ONNX Runtime quantized no operator")
        os.replace(tmp / "q.onnx", out)
    return out


def _pre_process(fp32_onnx: Path, tmp: Path) -> Path:
    # Without this, ORT may quantize only the weights of an optimized graph, silently.
    # auto_merge: dynamic axes of different inputs carry different names (input_ids_1,
    # attention_mask_1) that the graph adds together; ORT may treat them as one.
    pre = tmp / "pre.onnx"
    quant_pre_process(str(fp32_onnx), str(pre), auto_merge=True)
    return pre


def _calibrate(
    pre: Path, cal: Calibration, samples: dict[str, np.ndarray], batch: int, tmp: Path
) -> TensorsData:
    options: dict[str, object] = {"symmetric": True}
    if cal.method is SpecMethod.PERCENTILE:
        options["percentile"] = cal.percentile
    if cal.method is SpecMethod.ENTROPY:
        # ORT's default 128 bins equal the 128 quantized bins, leaving the entropy search
        # a single candidate (the full range, i.e. minmax); TensorRT's calibrator uses 2048.
        options.update(num_bins=2048, num_quantized_bins=128)
    with quiet(tmp.parent / LOG_FILE):  # ORT's calibrators print progress of their own
        return _collect(pre, cal, samples, batch, tmp, options)


def _collect(
    pre: Path, cal: Calibration, samples: dict[str, np.ndarray], batch: int, tmp: Path, options: dict
) -> TensorsData:
    calibrator = create_calibrator(
        pre,
        None,  # calibrate every float tensor, so the TensorRT table covers the whole graph
        augmented_model_path=str(tmp / "augmented.onnx"),
        calibrate_method=_METHODS[cal.method],
        providers=["CPUExecutionProvider"],
        extra_options=options,
    )
    count = next(iter(samples.values())).shape[0]
    step = max(batch, 1)
    chunk = max(1, SAMPLES_PER_PASS // step) * step
    with progress(count, "int8 calibration", unit="sample") as bar:
        for start in range(0, count, chunk):
            calibrator.collect_data(SampleReader(samples, batch, start, start + chunk))
            bar.advance(min(chunk, count - start))
    ranges = calibrator.compute_data()
    del calibrator
    return ranges


def _excluded_nodes(model: ModelSpec, cal: Calibration, fp32_onnx: Path, pre: Path) -> list[str]:
    graph_nodes = list(onnx.load(str(pre), load_external_data=False).graph.node)
    names = {n.name for n in graph_nodes}
    known = names | {n.name for n in onnx.load(str(fp32_onnx), load_external_data=False).graph.node}
    unknown = [n for n in cal.exclude_nodes if n not in known]
    if unknown:
        raise SpecError(
            f"nodes {unknown} are not in the ONNX graph", model=model.name, field="calibration.exclude_nodes"
        )
    by_type = [n.name for n in graph_nodes if n.name and n.op_type in set(cal.exclude_op_types)]
    return [n for n in cal.exclude_nodes if n in names] + by_type


def _check_static(path: Path, model: str) -> None:
    _load_in_ort(path, model, "int8")
    graph = onnx.load(str(path)).graph
    constants = {i.name for i in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    activations = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in constants]
    if not activations or not _has_op_in(graph, {"DequantizeLinear"}):
        raise BuildError(
            f"model '{model}': int8: the quantized graph has no QuantizeLinear/DequantizeLinear on "
            "activations (only weights were quantized); check calibration.op_types / exclusions"
        )


def _load_in_ort(path: Path, model: str, variant: str) -> None:
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for invalid graphs
        raise BuildError(f"model '{model}': {variant}: ONNX Runtime cannot load {path.name}: {exc}") from exc


def _has_op_in(graph: onnx.GraphProto, ops: set[str]) -> bool:
    return any(n.op_type in ops for n in graph.node)


def activation_scales(path: Path) -> dict[str, float]:
    """Per-tensor scales of the activations the Q/DQ model quantizes (after ORT's range adjustments)."""
    graph = onnx.load(str(path)).graph
    inits = {i.name: i for i in graph.initializer}
    scales = {}
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits and node.input[1] in inits:
            scale = numpy_helper.to_array(inits[node.input[1]])
            if scale.size == 1:
                scales[node.input[0]] = float(scale.reshape(()))
    return scales


def write_trt_table(ranges: TensorsData, path: Path, scales: dict[str, float] | None = None) -> Path:
    """TensorRT's calibration cache: ``tensor: hex(float32 scale)``, scale = amax / 127.

    ``scales`` (those the Q/DQ model uses) take precedence over the raw calibrated ranges."""
    scales = scales or {}
    lines = [TRT_CACHE_HEADER]
    for name in sorted(set(ranges.keys()) | set(scales)):
        scale = scales.get(name)
        if scale is None:
            lowest, highest = ranges[name].range_value
            amax = float(max(np.abs(lowest).max(), np.abs(highest).max()))
            scale = amax / 127.0 if amax > 0 else 1.0 / 127.0
        lines.append(f"{name}: {struct.pack('>f', scale).hex()}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
