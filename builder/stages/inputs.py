"""What each stage reads, declared as a small typed model, and the cache key made from it.

A stage's key is its declared inputs plus the versions of the tools that make its
artifact: changing a source file, a data file or a tool version re-runs exactly the
stages that read it, and nothing else.
"""

from __future__ import annotations

import importlib.util
import modulefinder
from dataclasses import asdict, dataclass, replace
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import IO, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from builder import __version__
from builder.cache import file_hash, key_of, tree_hash
from builder.spec import (
    Calibration,
    DataSpec,
    DynamicInt8,
    ModelSpec,
    OmitsUnset,
    Profile,
    TensorSpec,
    Tolerance,
)
from builder.spec.engine import Int8Mode
from builder.spec.sequence import SequenceSpec
from builder.stages.code import code_fingerprint

STAGE_VERSION = 1  # bump when a stage's output format changes


@cache
def tool_version(tool: str) -> str:
    try:
        return metadata.version(tool)
    except metadata.PackageNotFoundError:
        return "absent"


class StageInputs(BaseModel):
    """The inputs of one stage; ``key()`` hashes them with the versions of ``TOOLS``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    STAGE: ClassVar[str]
    TOOLS: ClassVar[tuple[str, ...]] = ()
    CODE: ClassVar[tuple[str, ...]] = ()  # the project modules (or packages) that make the artifact

    def key(self) -> str:
        tools = {tool: tool_version(tool) for tool in self.TOOLS}
        code = code_fingerprint(self.CODE)
        return key_of(self.STAGE, STAGE_VERSION, __version__, self.model_dump(mode="json"), tools, code)


class ExportInputs(StageInputs):
    STAGE = "export"
    TOOLS = ("torch", "onnx", "transformers")  # transformers: a checkpoint source's model
    # every source kind, what writes the file, and the stage's body in the pipeline
    CODE = ("builder.sources", "builder.stages.export", "builder.pipeline:_export")
    source: str
    source_fingerprint: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int
    profiles: list[Profile]
    opset: int


class CheckInputs(StageInputs, OmitsUnset):
    STAGE = "check"
    TOOLS = ("onnx", "onnxsim", "onnxruntime")
    CODE = ("builder.stages.check", "builder.pipeline:_check")
    exported_sha256: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    max_batch_size: int
    simplify: bool
    profiles: list[Profile]
    sequence: SequenceSpec | None = None  # a stateful model's states, checked against the graph

    LATER = ("sequence",)


class ReferenceInputs(StageInputs, OmitsUnset):
    STAGE = "reference"
    TOOLS = ("torch", "onnxruntime", "numpy", "transformers")
    CODE = (
        "builder.data",
        "builder.sources",
        "builder.stages.export",
        "builder.stages.verify",
        "builder.pipeline:_reference",
    )
    exported_sha256: str
    source_fingerprint: str
    evaluation: str  # fingerprint of the evaluation data and its reader
    sequence: SequenceSpec | None = None  # a stateful model's reference is a loop, states carried

    LATER = ("sequence",)


class Fp16Inputs(StageInputs):
    STAGE = "fp16"
    TOOLS = ("onnx", "onnxconverter-common")
    CODE = ("builder.stages.fp16", "builder.pipeline:_fp16")
    checked_sha256: str


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


TENSORRT_INT8 = Int8Recipe(quantize_bias=False, for_tensorrt=True)


def int8_recipe(tensorrt: bool, model: ModelSpec | None = None) -> Int8Recipe:
    """For a target that builds TensorRT plans from its INT8 variant, TensorRT's recipe; for one
    that runs it in ONNX Runtime, ONNX Runtime's, with 7-bit weights on a CPU without VNNI."""
    if not tensorrt:
        return Int8Recipe(reduce_range=not cpu_has_vnni())
    table = model is not None and model.engine.int8_mode is Int8Mode.CALIBRATOR
    return replace(TENSORRT_INT8, calibration_table=table)


@cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's flags in /proc/cpuinfo (none where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(
        next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    )


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI or AVX-VNNI: ONNX Runtime's INT8 dot products do not saturate there."""
    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16() -> bool:
    """AVX-512 BF16 or AMX BF16: bfloat16 arithmetic runs natively; elsewhere vLLM's CPU kernels
    emulate it (2.6x fewer tokens/s than float32 at 16 streams, bench/results/llm_serving.json)."""
    return bool(set(BF16_FLAGS) & cpu_flags())


class Int8RangesInputs(StageInputs):
    """The calibration static INT8 is made from, shared by every target's recipe."""

    STAGE = "int8-ranges"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = (
        "builder.data",
        "builder.stages.quantize",
        "builder.stages.smoothing",
        "builder.pipeline:_int8_ranges",
    )
    checked_sha256: str
    calibration: Calibration
    data: str  # fingerprint of the calibration data and its reader
    opset: dict[str, bool]  # where the checked graph is below opset 13 (converted, or per tensor)


class Int8Inputs(StageInputs):
    STAGE = "int8"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = ("builder.data", "builder.stages.quantize", "builder.pipeline:_int8")
    ranges_key: str
    recipe: dict[str, bool]


class Int8DynamicInputs(StageInputs):
    STAGE = "int8_dynamic"
    TOOLS = ("onnx", "onnxruntime", "numpy")
    CODE = (
        "builder.data",
        "builder.stages.quantize",
        "builder.stages.smoothing",
        "builder.pipeline:_int8_dynamic",
    )
    checked_sha256: str
    options: DynamicInt8
    data: str | None  # calibration data, when smoothing uses it


# The CPU features that decide which kernels a runtime runs, and so a variant's accuracy and speed:
# another CPU verifies and times every variant again.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", *BF16_FLAGS, "amx_int8")


def kernel_flags() -> list[str]:
    return sorted(set(KERNEL_FLAGS) & cpu_flags())


class VerifyInputs(StageInputs):
    STAGE = "verify"
    TOOLS = ("onnxruntime", "openvino", "numpy")
    CODE = ("builder.stages.verify", "builder.pipeline:_verify")
    variant_sha256: str
    reference_key: str
    tolerance: Tolerance
    opt_batch: int
    threads: int
    runtime: str
    precision: str
    cpu: list[str]


def module_fingerprint(ref: str, spec_dir: Path) -> str:
    """Hash of the module defining ``pkg.mod:fn`` and of every module it imports from the
    spec's folder (found without importing anything)."""
    module = ref.partition(":")[0]
    root = spec_dir.resolve()
    origin = _module_file(module, root)
    if origin is None:
        return f"unresolved:{module}"
    finder = _Finder(path=[str(root)])
    try:
        finder.import_hook(module)
    except (ImportError, SyntaxError):
        return file_hash(origin)
    found = (getattr(m, "__file__", None) for m in finder.modules.values())
    files = {origin} | {Path(f) for f in found if f}
    local = sorted(f for f in files if f.is_file() and f.resolve().is_relative_to(root))
    return key_of([(str(f.resolve().relative_to(root)), file_hash(f)) for f in local])


class _Finder(modulefinder.ModuleFinder):
    """A ModuleFinder for which a folder without ``__init__.py`` (a namespace package, which
    Python 3.11's finder fails on with an AttributeError) is a module it cannot find, as for
    any other import from outside the spec folder."""

    def find_module(
        self, name: str, path: str | None, parent: modulefinder.Module | None = None
    ) -> tuple[IO[Any] | None, str | None, tuple[str, str, int]]:
        try:
            return super().find_module(name, path, parent)
        except AttributeError as exc:  # the found spec has no loader
            raise ImportError(f"namespace package {name}") from exc


def _module_file(module: str, root: Path) -> Path | None:
    path = root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(found.origin) if found and found.origin and Path(found.origin).is_file() else None


def data_fingerprint(data: DataSpec, spec_dir: Path) -> str:
    parts: list[str] = []
    if data.data is not None:
        path = spec_dir / data.data
        parts.append(tree_hash(path) if path.exists() else "missing")
    if data.reader is not None:
        parts.append(module_fingerprint(data.reader, spec_dir))
    return key_of(parts, data.max_samples)
