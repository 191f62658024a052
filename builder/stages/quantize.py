"""How the INT8 stages quantize (``int8_ranges``, ``int8``, ``int8_dynamic``): static explicit Q/DQ
(TensorRT-compatible) and ORT dynamic (CPU only).

Static quantization calibrates once for the Q/DQ model (ranges through ORT's
calibration cache). TensorRT 10's implicit INT8 (``engine.int8_mode: calibrator``)
also wants a calibration table: it is computed on the graph TensorRT parses (the
FP32 variant), whose tensor names and ranges can differ from the pre-processed or
smoothed graph the Q/DQ model is made from.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, numpy_helper
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

from builder.data import load_samples
from builder.errors import ModelRefused, SpecError
from builder.host import cpu_has_vnni
from builder.progress import progress, quiet
from builder.spec import Calibration, ModelSpec, Smoothing
from builder.spec import CalibrationMethod as SpecMethod
from builder.spec.engine import Int8Mode
from builder.stages.base import ModelJob, Samples
from builder.stages.check import graph_opset
from builder.stages.runtimes import ort_session


@dataclass(frozen=True)
class Int8Recipe:
    """How the static INT8 variant is made for the target that serves it."""

    # ONNX Runtime's default turns Conv/Gemm biases into INT32 behind a DequantizeLinear
    # (so that its CPU kernels fuse); TensorRT refuses INT32 quantized data.
    quantize_bias: bool = True
    for_tensorrt: bool = False  # refuse what TensorRT's ONNX parser refuses
    calibration_table: bool = False  # for TensorRT 10's implicit INT8 (engine.int8_mode: calibrator)
    # 7-bit weights: ONNX Runtime's INT8 kernels on x86 without VNNI add pairs of u8 x s8
    # products in 16 bits, which saturate with 8-bit weights (the tiny test model: min cosine
    # 0.77 fused against 0.997 unfused; 0.9975 with 7-bit weights).
    reduce_range: bool = False

    def fields(self) -> dict[str, bool]:
        return asdict(self)


ONNX_RUNTIME_INT8 = Int8Recipe()
TENSORRT_INT8 = Int8Recipe(quantize_bias=False, for_tensorrt=True)


def int8_recipe(tensorrt: bool, model: ModelSpec | None = None) -> Int8Recipe:
    """For a target that builds TensorRT plans from its INT8 variant, TensorRT's recipe; for one
    that runs it in ONNX Runtime, ONNX Runtime's, with 7-bit weights on a CPU without VNNI."""
    if not tensorrt:
        return Int8Recipe(reduce_range=not cpu_has_vnni())
    table = model is not None and model.engine.int8_mode is Int8Mode.CALIBRATOR
    return replace(TENSORRT_INT8, calibration_table=table)


def calibration_samples(job: ModelJob) -> Samples:
    """The model's calibration samples, read and checked against the spec."""
    model, ctx = job.model, job.ctx
    assert model.calibration is not None  # the spec requires it for the INT8 variants that read it
    return load_samples(
        model.calibration, model, spec_dir=ctx.spec_dir, spec_file=ctx.spec_file, section="calibration"
    )


def smoothed(fp32: Path, smooth: Smoothing | None, samples: Samples, out: Path) -> Path:
    """The FP32 graph with MatMul-input outliers smoothed away (``smoothed.onnx`` in ``out``), or
    ``fp32`` itself."""
    if smooth is None:
        return fp32
    from builder.stages.smoothing import smooth_matmul_inputs

    try:
        return smooth_matmul_inputs(
            fp32, out / SMOOTHED, samples, alpha=smooth.alpha, nodes=smooth.nodes or None
        )
    except ValueError as exc:
        raise SpecError(str(exc), field="smooth.nodes") from None


SMOOTHED = "smoothed.onnx"  # the smoothed source graph, kept in the int8-ranges stage's folder

# First line of the table written here; the engine builder replaces it with the header of
# the TensorRT that reads it (TensorRT skips a cache whose header is not its own).
TRT_CACHE_HEADER = "TRT-0-EntropyCalibration2"
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


# Per-channel DequantizeLinear (its ``axis``) is in the default domain from opset 13.
PER_CHANNEL_OPSET = 13


@dataclass(frozen=True)
class QuantizeResult:
    onnx: Path
    calibration_table: Path | None  # TensorRT-format calibration table from the same ranges
    note: str | None = None  # how a graph below opset 13 was quantized


class SampleReader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime has no type information
    """Feeds samples in batches; with ``batch == 0`` one sample at a time, without a batch axis."""

    def __init__(self, samples: dict[str, NDArray[Any]], batch: int, start: int = 0, stop: int | None = None):
        self.samples = samples
        self.batch = batch
        self.count = next(iter(samples.values())).shape[0]
        self.start = start
        self.stop = self.count if stop is None else min(stop, self.count)
        self._it = self._batches()

    def _batches(self) -> Iterator[dict[str, NDArray[Any]]]:
        step = max(self.batch, 1)
        for i in range(self.start, self.stop, step):
            if self.batch == 0:
                yield {k: np.asarray(v[i]) for k, v in self.samples.items()}  # rank 0 stays an array
            else:
                yield {k: v[i : i + step] for k, v in self.samples.items()}

    def get_next(self) -> dict[str, NDArray[Any]] | None:
        return next(self._it, None)

    def __len__(self) -> int:
        return len(range(self.start, self.stop, max(self.batch, 1)))


def calibration_batch(model: ModelSpec) -> int:
    return min(model.max_batch_size, CALIBRATION_BATCH_CAP)


@dataclass(frozen=True)
class Int8Config:
    """One way to quantize a calibrated graph: whose ranges (a calibration method's, by its name in
    :data:`METHODS`), symmetric INT8 activations or asymmetric UINT8 ones, and the nodes kept in
    float beyond the spec's own exclusions."""

    method: str
    symmetric: bool = True
    float_nodes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        kept = f", {len(self.float_nodes)} in float" if self.float_nodes else ""
        return f"{self.method} {'symmetric' if self.symmetric else 'asymmetric'}{kept}"

    def with_float(self, nodes: tuple[str, ...]) -> Int8Config:
        return replace(self, float_nodes=nodes)


def method_name(cal: Calibration) -> str:
    """The spec's calibration method as a candidate's name (``percentile 99.999``)."""
    return f"percentile {cal.percentile:g}" if cal.method is SpecMethod.PERCENTILE else cal.method.value


# The calibration methods the INT8 search tries after the spec's own, in this order: their ranges all
# come from one pass over the calibration samples (one histogram of each tensor's values).
SEARCHED_METHODS = (
    "minmax",
    "percentile 99.999",
    "percentile 99.99",
    "percentile 99.9",
    "entropy",
    "distribution",
)
HISTOGRAM_BINS = 4096  # over [-max|x|, max|x|]: 2048 bins on each side, as ORT's percentile takes
ENTROPY_BINS = 2048  # the histogram entropy searches (TensorRT's calibrator's count)
ENTROPY_WIDTHS = 256  # the thresholds it compares, evenly spaced (ORT's compares every bin: 961)


def ranges_file(method: str, symmetric: bool) -> str:
    return f"ranges.{method.replace(' ', '-')}.{'sym' if symmetric else 'asym'}.json"


@dataclass(frozen=True)
class Calibrated:
    """What static INT8 is made from, the same for every target's recipe: the graph ready for
    quantize_static and its activations' ranges (ONNX Runtime's calibration cache): the spec's
    method's, and where the search asked for them, every searched method's (``candidates``, each a
    file of :func:`ranges_file` beside it, symmetric and asymmetric; a method whose ranges equal an
    earlier one's is left out)."""

    graph: Path
    ranges: Path
    source: Path  # the graph calibrated (smoothed or not), as it was given
    per_channel: bool
    exclude: tuple[str, ...]  # the nodes left in float
    note: str | None = None  # how a graph below opset 13 was quantized
    candidates: tuple[tuple[str, bool], ...] = ()  # (method, symmetric) whose ranges are beside it
    same_as: tuple[tuple[str, str], ...] = ()  # a candidate left out, and the one whose ranges it has

    GRAPH: ClassVar[str] = "calibrated.onnx"
    RANGES: ClassVar[str] = "ranges.json"

    def to_info(self) -> dict[str, object]:
        """What a stage records of it, beside its files (:meth:`read`)."""
        info: dict[str, object] = {"per_channel": self.per_channel, "exclude": list(self.exclude)}
        if self.candidates:
            info["candidates"] = [[m, s] for m, s in self.candidates]
            info["same_as"] = [list(pair) for pair in self.same_as]
        return info | ({"note": self.note} if self.note else {})

    @classmethod
    def read(cls, folder: Path, source: Path, info: Mapping[str, object]) -> Calibrated:
        exclude, note = info["exclude"], info.get("note")
        assert isinstance(exclude, list), info
        candidates, same = info.get("candidates") or [], info.get("same_as") or []
        assert isinstance(candidates, list) and isinstance(same, list), info
        return cls(
            folder / cls.GRAPH, folder / cls.RANGES, source, bool(info["per_channel"]),
            tuple(str(n) for n in exclude), str(note) if note else None,
            tuple((str(m), bool(s)) for m, s in candidates), tuple((str(a), str(b)) for a, b in same),
        )  # fmt: skip

    def ranges_of(self, config: Int8Config) -> Path:
        """The ranges file of ``config``'s method and symmetry (of the candidate whose ranges it
        shares, where it was left out; without candidates, the spec's method's: ``ranges``)."""
        candidate = (config.method, config.symmetric)
        if not self.candidates:
            assert config.symmetric, "asymmetric ranges are calibrated for the search only"
            return self.ranges
        same = dict(self.same_as)
        label = _label(candidate)
        if label in same:
            method, symmetry = same[label].rsplit(" ", 1)
            candidate = (method, symmetry == "symmetric")
        assert candidate in self.candidates, f"no ranges calibrated for {label}"
        return self.ranges.parent / ranges_file(*candidate)


def calibrate_int8(
    model: ModelSpec,
    fp32_onnx: Path,
    samples: dict[str, NDArray[Any]],
    out_dir: Path,
    *,
    candidates: bool = False,
) -> Calibrated:
    """The graph to quantize (opset ready, pre-processed) and the ranges of the tensors of the op
    types it quantizes (all where the spec names none), as quantize_static calibrates by itself,
    into ``out_dir``; with ``candidates``, every searched method's ranges too, from the same pass."""
    cal = _calibration(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="calib.", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        _load_in_ort(fp32_onnx, model.name, "fp32")
        source, per_channel, note = per_channel_ready(fp32_onnx, cal.per_channel, tmp)
        pre = _pre_process(source, tmp)
        exclude = _excluded_nodes(model, cal, fp32_onnx, pre)
        _require_op_types(pre, cal, model.name)
        kept: list[tuple[str, bool]] = []
        same: list[tuple[str, str]] = []
        if candidates:
            every = _calibrate_all(pre, cal, samples, calibration_batch(model), tmp, cal.op_types or None)
            ranges = every[(method_name(cal), True)]
            kept, same = _distinct(every)
            for method, symmetric in kept:
                name = ranges_file(method, symmetric)
                save_tensors_data(every[(method, symmetric)], tmp / name)
                os.replace(tmp / name, out_dir / name)
        else:
            ranges = _calibrate(pre, cal, samples, calibration_batch(model), tmp, cal.op_types or None)
        save_tensors_data(ranges, tmp / Calibrated.RANGES)
        os.replace(tmp / Calibrated.RANGES, out_dir / Calibrated.RANGES)
        os.replace(pre, out_dir / Calibrated.GRAPH)
    return Calibrated(
        out_dir / Calibrated.GRAPH, out_dir / Calibrated.RANGES, fp32_onnx, per_channel, tuple(exclude), note,
        tuple(kept), tuple(same),
    )  # fmt: skip


def quantize_calibrated(
    model: ModelSpec,
    calibrated: Calibrated,
    out_dir: Path,
    recipe: Int8Recipe = ONNX_RUNTIME_INT8,
    *,
    samples: dict[str, NDArray[Any]] | None = None,
    tensorrt_graph: Path | None = None,
    config: Int8Config | None = None,
) -> QuantizeResult:
    """Static INT8 with explicit Q/DQ by ``recipe`` and ``config`` (default: the spec's method,
    symmetric); with ``recipe.calibration_table`` also TensorRT's calibration table for
    ``tensorrt_graph`` (default: the calibrated source), calibrated on ``samples``."""
    cal = _calibration(model)
    config = config or Int8Config(method_name(cal))
    out_dir.mkdir(parents=True, exist_ok=True)
    out, table = out_dir / "int8.onnx", out_dir / "int8.calibration.cache"
    with tempfile.TemporaryDirectory(prefix="quant.", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        quantize_config(model, calibrated, tmp / "int8.onnx", recipe, config)
        if recipe.calibration_table:
            assert samples is not None, "TensorRT's table is calibrated on the samples"
            graph = tensorrt_graph or calibrated.source
            _tensorrt_table(graph, cal, samples, calibration_batch(model), tmp, tmp / "table")
            if graph.resolve() == calibrated.source.resolve():
                # Same graph: the tensors both quantize keep the Q/DQ model's scales (after
                # ORT's range adjustments), so implicit and explicit INT8 agree.
                write_trt_table(ranges_of(tmp / "table"), tmp / "table", activation_scales(tmp / "int8.onnx"))
            os.replace(tmp / "table", table)
        os.replace(tmp / "int8.onnx", out)
    return QuantizeResult(out, table if recipe.calibration_table else None, calibrated.note)


def quantize_config(
    model: ModelSpec, calibrated: Calibrated, out: Path, recipe: Int8Recipe, config: Int8Config
) -> Path:
    """The Q/DQ graph of ``config`` at ``out``, checked (ONNX Runtime loads it; TensorRT's parser
    would take it, for TensorRT's recipe)."""
    assert config.symmetric or not recipe.for_tensorrt, "TensorRT takes symmetric INT8 only"
    cal = _calibration(model)
    activations = QuantType.QInt8 if config.symmetric else QuantType.QUInt8
    options = {"ActivationSymmetric": config.symmetric, "WeightSymmetric": True}
    if calibrated.exclude or config.float_nodes:
        # With asymmetric activations ONNX Runtime folds a Relu/Clip into the range of the Q/DQ
        # after it, which a node left in float would read unclipped (min cosine 0.25 on
        # EfficientNet-Lite0 with its depthwise convolutions in float): keep them.
        options["QDQKeepRemovableActivations"] = True
    quantize_static(
        str(calibrated.graph),
        str(out),
        calibration_data_reader=None,  # ranges come from the cache: one calibration pass
        quant_format=QuantFormat.QDQ,
        per_channel=calibrated.per_channel,
        activation_type=activations,
        weight_type=QuantType.QInt8,
        reduce_range=recipe.reduce_range,
        nodes_to_exclude=[*calibrated.exclude, *config.float_nodes],
        op_types_to_quantize=cal.op_types or None,
        # the ranges' own method: the search's all come as minmax's (lowest, highest) pairs
        calibrate_method=CalibrationMethod.MinMax if calibrated.candidates else _METHODS[cal.method],
        extra_options={**options, "QuantizeBias": recipe.quantize_bias},
        calibration_cache_path=str(calibrated.ranges_of(config)),
    )
    _check_static(out, model.name, recipe)
    return out


def quantize_int8(
    model: ModelSpec,
    fp32_onnx: Path,
    samples: dict[str, NDArray[Any]],
    out_dir: Path,
    recipe: Int8Recipe = ONNX_RUNTIME_INT8,
    tensorrt_graph: Path | None = None,
) -> QuantizeResult:
    """Calibrated (:func:`calibrate_int8`) and quantized (:func:`quantize_calibrated`) at once;
    nothing of the calibration is left in ``out_dir``."""
    _calibration(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="calibrated.", dir=out_dir) as tmp_name:
        calibrated = calibrate_int8(model, fp32_onnx, samples, Path(tmp_name))
        return quantize_calibrated(
            model, calibrated, out_dir, recipe, samples=samples, tensorrt_graph=tensorrt_graph
        )


def _calibration(model: ModelSpec) -> Calibration:
    if model.calibration is None:
        raise SpecError("int8 needs calibration data", model=model.name, field="calibration")
    return model.calibration


def per_channel_ready(fp32_onnx: Path, per_channel: bool, tmp: Path) -> tuple[Path, bool, str | None]:
    """The graph to quantize and whether per channel: below opset 13 a graph is converted to 13
    (``onnx.version_converter``) or, where that fails, quantized per tensor; the note says which."""
    opset = graph_opset(fp32_onnx)
    if not per_channel or opset >= PER_CHANNEL_OPSET:
        return fp32_onnx, per_channel, None
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(onnx.load(str(fp32_onnx)), PER_CHANNEL_OPSET)
        onnx.checker.check_model(converted)
        path = tmp / "opset13.onnx"
        onnx.save(converted, str(path))
        ort_session(path)
    except Exception as exc:  # the converter lacks adapters for some ops; ORT may refuse its result
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return fp32_onnx, False, f"opset {opset} could not be converted to 13 ({first}): quantized per tensor"
    return path, True, f"opset {opset} converted to {PER_CHANNEL_OPSET} for per-channel Q/DQ"


def _tensorrt_table(
    graph: Path, cal: Calibration, samples: dict[str, NDArray[Any]], batch: int, tmp: Path, out: Path
) -> None:
    """Calibrate every float tensor of the graph TensorRT parses, as it is (no pre-processing)."""
    work = tmp / "tensorrt"
    work.mkdir()
    write_trt_table(_calibrate(graph, cal, samples, batch, work, None), out)


def ranges_of(table: Path) -> dict[str, float]:
    """Scales of a table written by :func:`write_trt_table`."""
    pairs = (line.split(": ") for line in table.read_text(encoding="utf-8").splitlines()[1:])
    return {name: struct.unpack(">f", bytes.fromhex(value))[0] for name, value in pairs}


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
            raise ModelRefused(f"model '{model.name}': int8_dynamic: ONNX Runtime quantized no operator")
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
    pre: Path,
    cal: Calibration,
    samples: dict[str, NDArray[Any]],
    batch: int,
    tmp: Path,
    op_types: list[str] | None,
) -> TensorsData:
    """The ranges of the float tensors of ``op_types``' nodes (None: of every node)."""
    options: dict[str, object] = {"symmetric": True}
    if cal.method is SpecMethod.PERCENTILE:
        options["percentile"] = cal.percentile
    if cal.method is SpecMethod.ENTROPY:
        # ORT's default 128 bins equal the 128 quantized bins, leaving the entropy search
        # a single candidate (the full range, i.e. minmax); TensorRT's calibrator uses 2048.
        options.update(num_bins=2048, num_quantized_bins=128)
    with quiet(tmp.parent / LOG_FILE):  # ORT's calibrators print progress of their own
        return _collect(pre, cal, samples, batch, tmp, options, op_types)


def _calibrate_all(
    pre: Path,
    cal: Calibration,
    samples: dict[str, NDArray[Any]],
    batch: int,
    tmp: Path,
    op_types: list[str] | None,
) -> dict[tuple[str, bool], TensorsData]:
    """Every searched method's ranges, symmetric and asymmetric, from one pass: a histogram of each
    tensor's values over [-max|x|, max|x|] (with its min and max) gives minmax, the percentiles (on
    the folded histogram where symmetric, cutting both tails where not), entropy and distribution."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    options: dict[str, object] = {"symmetric": False, "num_bins": HISTOGRAM_BINS}
    with quiet(tmp.parent / LOG_FILE):
        calibrator = create_calibrator(
            pre,
            op_types,
            augmented_model_path=str(tmp / "augmented.onnx"),
            calibrate_method=CalibrationMethod.Percentile,
            providers=["CPUExecutionProvider"],
            extra_options=options,
        )
        _feed(calibrator, samples, batch)
        collector = calibrator.collector
        del calibrator
        histograms: dict[str, tuple[Any, ...]] = dict(collector.histogram_dict)
        methods = [method_name(cal), *(m for m in SEARCHED_METHODS if m != method_name(cal))]
        out: dict[tuple[str, bool], TensorsData] = {}
        entropy: dict[str, float] = {}  # each tensor's entropy threshold, for both symmetries
        for method in methods:
            for symmetric in (True, False):
                ranges = {
                    name: _range(method, symmetric, h, HistogramCollector, entropy, name)
                    for name, h in histograms.items()
                }
                out[(method, symmetric)] = TensorsData(CalibrationMethod.MinMax, ranges)
    return out


def _range(
    method: str,
    symmetric: bool,
    histogram: tuple[Any, ...],
    collector: Any,
    entropy: dict[str, float],
    name: str,
) -> tuple[Any, Any]:
    """One tensor's range by ``method`` from its value histogram ``(hist, edges, min, max, amax)``."""
    hist, edges, lowest, highest = histogram[0], histogram[1], histogram[2], histogram[3]
    dtype = edges.dtype
    amax = np.array(max(abs(float(lowest)), abs(float(highest))), dtype=dtype)
    if method == "minmax" or method == "distribution" or hist.sum() == 0:
        # distribution's ranges for INT8 are its histogram's edges, [-max|x|, max|x|]: minmax's
        found = (np.array(lowest, dtype=dtype), np.array(highest, dtype=dtype))
        return (-amax, amax) if method == "distribution" and symmetric else found
    if method.startswith("percentile "):
        percentile = float(method.split()[1])
        if symmetric:
            half = hist.size // 2
            folded = hist[half:] + hist[:half][::-1]
            cdf = np.cumsum(folded / folded.sum())
            index = min(int(np.searchsorted(cdf, percentile / 100.0)) + 1, half)
            threshold = np.array(min(float(edges[half + index]), float(amax)), dtype=dtype)
            return (-threshold, threshold)
        cut = collector("percentile", False, hist.size, 128, percentile, "same")
        cut.histogram_dict = {"t": histogram}
        lo, hi = cut.compute_percentile()["t"][:2]
        return (np.array(lo, dtype=dtype), np.array(hi, dtype=dtype))
    assert method == "entropy", method
    if name not in entropy:
        entropy[name] = _entropy_threshold(*_coarse(hist, edges))
    width = entropy[name]
    if symmetric:
        return (np.array(-width, dtype=dtype), np.array(width, dtype=dtype))
    # asymmetric: the entropy threshold clips the tails, never widens past what was seen
    return (
        np.array(max(-width, float(lowest)), dtype=dtype),
        np.array(min(width, float(highest)), dtype=dtype),
    )


def _coarse(hist: NDArray[Any], edges: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
    """About :data:`ENTROPY_BINS` bins from a histogram symmetric about 0 (an even count of bins,
    grown by ORT's merging as wider samples came): the outermost bins that do not fill a coarse one
    are added to the ends."""
    step = max(hist.size // ENTROPY_BINS, 1)
    extra = (hist.size % (2 * step)) // 2
    if extra:
        trimmed = hist[extra:-extra].copy()
        trimmed[0] += hist[:extra].sum()
        trimmed[-1] += hist[-extra:].sum()
        hist, edges = trimmed, edges[extra:-extra]
    return hist.reshape(-1, step).sum(axis=1), edges[::step]


def _entropy_threshold(hist: NDArray[Any], edges: NDArray[Any], quantized: int = 128) -> float:
    """The half-width of the symmetric range whose 128-level quantization loses the least
    information (KL divergence, TensorRT's entropy calibration), over a histogram symmetric about 0:
    the same search as ONNX Runtime's, its inner loop in numpy."""
    n = hist.size
    centre, half = n // 2, quantized // 2
    counts = hist.astype(np.float64)
    best, best_width = np.inf, centre
    stride = max(1, (centre - half) // ENTROPY_WIDTHS)
    for width in range(half, centre + 1, stride):
        middle = counts[centre - width : centre + width]
        p = middle.copy()
        p[0] += counts[: centre - width].sum()
        p[-1] += counts[centre + width :].sum()
        group = (np.arange(2 * width) * quantized) // (2 * width)
        used = middle != 0
        total = np.bincount(group, weights=middle, minlength=quantized)
        nonzero = np.bincount(group, weights=used, minlength=quantized)
        q = np.where(used, total[group] / np.maximum(nonzero[group], 1.0), 0.0)
        if q.sum() == 0 or p.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        seen = p > 0
        kl = float(np.sum(p[seen] * np.log(p[seen] / np.maximum(q[seen], 1e-12))))
        if kl < best:
            best, best_width = kl, width
    return float(edges[centre + best_width])


def _distinct(
    every: dict[tuple[str, bool], TensorsData],
) -> tuple[list[tuple[str, bool]], list[tuple[str, str]]]:
    """The candidates whose ranges differ from every earlier one's, and each left out with the
    earlier candidate it equals."""
    kept: list[tuple[str, bool]] = []
    same: list[tuple[str, str]] = []
    seen: dict[tuple[bool, bytes], tuple[str, bool]] = {}
    for candidate, data in every.items():
        symmetric = candidate[1]
        # Symmetric INT8 takes max(|lowest|, |highest|) of a range: ranges that agree there are one.
        ranges = [np.asarray(data[name].range_value, dtype=np.float32) for name in sorted(data.keys())]
        values = [np.abs(r).max(keepdims=True) if symmetric else r for r in ranges]
        fingerprint = (symmetric, b"".join(v.tobytes() for v in values))
        earlier = seen.get(fingerprint)
        if earlier is None:
            seen[fingerprint] = candidate
            kept.append(candidate)
        else:
            same.append((_label(candidate), _label(earlier)))
    return kept, same


def _label(candidate: tuple[str, bool]) -> str:
    return f"{candidate[0]} {'symmetric' if candidate[1] else 'asymmetric'}"


def _feed(calibrator: Any, samples: dict[str, NDArray[Any]], batch: int) -> None:
    count = next(iter(samples.values())).shape[0]
    step = max(batch, 1)
    chunk = max(1, SAMPLES_PER_PASS // step) * step
    # ONNX Runtime's histogram collectors stack a pass's outputs into one array: a short last batch
    # gets a pass of its own, so that every pass's batches have one shape.
    full = count - count % step
    passes = [(start, min(start + chunk, full)) for start in range(0, full, chunk)]
    if full < count:
        passes.append((full, count))
    with progress(count, "int8 calibration", unit="sample") as bar:
        for start, end in passes:
            calibrator.collect_data(SampleReader(samples, batch, start, end))
            bar.advance(end - start)


def _collect(
    pre: Path,
    cal: Calibration,
    samples: dict[str, NDArray[Any]],
    batch: int,
    tmp: Path,
    options: dict[str, object],
    op_types: list[str] | None,
) -> TensorsData:
    calibrator = create_calibrator(
        pre,
        op_types,
        augmented_model_path=str(tmp / "augmented.onnx"),
        calibrate_method=_METHODS[cal.method],
        providers=["CPUExecutionProvider"],
        extra_options=options,
    )
    _feed(calibrator, samples, batch)
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


def _require_op_types(pre: Path, cal: Calibration, model: str) -> None:
    """A graph without a node of ``op_types`` would come out with its weights quantized at most."""
    graph = onnx.load(str(pre), load_external_data=False).graph
    if cal.op_types and not _has_op_in(graph, set(cal.op_types)):
        raise ModelRefused(
            f"model '{model}': int8: no QuantizeLinear/DequantizeLinear on activations: the graph has "
            f"no node of calibration.op_types {cal.op_types}"
        )


def _check_static(path: Path, model: str, recipe: Int8Recipe) -> None:
    _load_in_ort(path, model, "int8")
    graph = onnx.load(str(path)).graph
    if recipe.for_tensorrt:
        problems = tensorrt_qdq_problems(graph)
        if problems:
            raise ModelRefused(f"model '{model}': int8: TensorRT cannot parse this Q/DQ graph: {problems[0]}")
    constants = {i.name for i in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    activations = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in constants]
    if not activations or not _has_op_in(graph, {"DequantizeLinear"}):
        raise ModelRefused(
            f"model '{model}': int8: the quantized graph has no QuantizeLinear/DequantizeLinear on "
            "activations (only weights were quantized); check calibration.op_types / exclusions"
        )


# Element types TensorRT 10 takes as quantized data of a DequantizeLinear (INT4/FP4 for weights only).
_TENSORRT_QUANTIZED = {
    TensorProto.INT8,
    TensorProto.FLOAT8E4M3FN,
    TensorProto.INT4,
    TensorProto.FLOAT4E2M1,
}


def tensorrt_qdq_problems(graph: onnx.GraphProto) -> list[str]:
    """DequantizeLinear nodes TensorRT's ONNX parser refuses (an INT32 bias, for one)."""
    types = {i.name: i.data_type for i in graph.initializer}
    types |= {
        n.output[0]: n.attribute[0].t.data_type
        for n in graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    }
    problems = []
    for node in graph.node:
        dtype = types.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if dtype is not None and dtype not in _TENSORRT_QUANTIZED:
            problems.append(
                f"DequantizeLinear '{node.name}' dequantizes {TensorProto.DataType.Name(dtype)} "
                f"'{node.input[0]}' (TensorRT takes INT8/FP8/INT4 quantized data)"
            )
    return problems


def _load_in_ort(path: Path, model: str, variant: str) -> None:
    try:
        ort_session(path)
    except Exception as exc:  # ORT raises its own exception types for invalid graphs
        raise ModelRefused(
            f"model '{model}': {variant}: ONNX Runtime cannot load {path.name}: {exc}"
        ) from exc


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


def write_trt_table(
    ranges: TensorsData | dict[str, float], path: Path, scales: dict[str, float] | None = None
) -> Path:
    """TensorRT's calibration cache: ``tensor: hex(float32 scale)``, scale = amax / 127.

    ``ranges`` are calibrated ranges (or scales); ``scales`` (those the Q/DQ model uses) take
    precedence for the tensors ``ranges`` has."""
    scales = scales or {}
    lines = [TRT_CACHE_HEADER]
    for name in sorted(ranges.keys()):
        scale = scales.get(name)
        if scale is None:
            scale = _scale(ranges[name])
        lines.append(f"{name}: {struct.pack('>f', scale).hex()}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _scale(value: object) -> float:
    if isinstance(value, float):
        return value
    lowest, highest = value.range_value  # type: ignore[attr-defined]
    amax = float(max(np.abs(lowest).max(), np.abs(highest).max()))
    return amax / 127.0 if amax > 0 else 1.0 / 127.0
