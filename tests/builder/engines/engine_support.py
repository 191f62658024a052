"""Helpers and fixtures for the engine tests: the recording TensorRT double, a tiny ONNX model and spec.

Only TensorRT is replaced (by ``trt_double/tensorrt``); the spec, ONNX files,
subprocesses, ONNX Runtime and the verification code are the real ones.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builder.engines.detect import GPU, TensorRTAvailability
from builder.spec import ModelSpec, Precision

DOUBLE_DIR = Path(__file__).parent / "trt_double"


class TrtDouble:
    """Handle on the recording double: its module and the journal its subprocesses write."""

    def __init__(self, module: ModuleType, journal: Path) -> None:
        self.module = module
        self.journal = journal

    def events(self) -> list[list[Any]]:
        """Calls recorded in this process and in build subprocesses (all go to the journal file)."""
        if not self.journal.is_file():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines()]

    def named(self, name: str) -> list[list[Any]]:
        return [e[1:] for e in self.events() if e[0] == name]


def _install_double(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str) -> Iterator[TrtDouble]:
    journal = tmp_path / "trt_journal.jsonl"
    monkeypatch.setenv("TRT_DOUBLE_VERSION", version)
    monkeypatch.setenv("PYTHONPATH", str(DOUBLE_DIR))  # for build subprocesses
    monkeypatch.syspath_prepend(str(DOUBLE_DIR))
    saved = sys.modules.pop("tensorrt", None)
    _forget_polygraphys_tensorrt()
    import tensorrt

    monkeypatch.setenv("TRT_DOUBLE_JOURNAL", str(journal))
    tensorrt.JOURNAL.clear()
    yield TrtDouble(tensorrt, journal)
    for name in [m for m in sys.modules if m == "tensorrt" or m == "cuda" or m.startswith("cuda.")]:
        del sys.modules[name]  # the CUDA double too (detection imported it)
    _forget_polygraphys_tensorrt()
    if saved is not None:
        sys.modules["tensorrt"] = saved


def _forget_polygraphys_tensorrt() -> None:
    """Polygraphy imports TensorRT lazily, once per process, into each of its modules: let the
    next test's double (another version, maybe) be the one its loaders find."""
    for name, module in list(sys.modules.items()):
        if name.startswith("polygraphy.") and module is not None:
            lazy = vars(module).get("trt")
            if type(lazy).__name__ == "LazyModule":
                object.__setattr__(lazy, "module", None)


@pytest.fixture
def trt10(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TrtDouble]:
    yield from _install_double(monkeypatch, tmp_path, "10.13.0.35")


@pytest.fixture
def trt11(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TrtDouble]:
    yield from _install_double(monkeypatch, tmp_path, "11.4.0.1")


@pytest.fixture
def trt108(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TrtDouble]:
    """The oldest supported TensorRT: no HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY yet."""
    yield from _install_double(monkeypatch, tmp_path, "10.8.0.43")


@pytest.fixture
def a10() -> TensorRTAvailability:
    return TensorRTAvailability(True, "test machine", "10.13.0.35", GPU("NVIDIA A10", "8.6"))


def write_onnx(path: Path, doc: str, shape: tuple[int | str, ...] = ("N", 3, "H", "W")) -> Path:
    """input -> Relu -> logits, by default [N, 3, H, W]: dynamic batch and spatial dims."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["logits"], name="relu0")],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], doc_string=doc)
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture
def variants(tmp_path: Path) -> dict[Precision, Path]:
    folder = tmp_path / "variants"
    folder.mkdir()
    return {
        p: write_onnx(folder / f"{p.value}.onnx", p.value)
        for p in (Precision.FP32, Precision.FP16, Precision.INT8)
    }


@pytest.fixture
def calibration_table(tmp_path: Path) -> Path:
    path = tmp_path / "calibration.cache"
    # The header the CPU stage once hard-coded (TensorRT 8.6's): TensorRT 10 skips such a cache.
    path.write_text("TRT-8600-EntropyCalibration2\ninput: 3c010a14\nlogits: 3c010a14\n")
    return path


def tiny_model(**changes: Any) -> ModelSpec:
    raw: dict[str, Any] = {
        "name": "tiny",
        "source": "tiny.onnx",
        "inputs": [{"name": "input", "dtype": "FP32", "dims": [3, -1, -1]}],
        "outputs": [{"name": "logits", "dtype": "FP32", "dims": [3, -1, -1]}],
        "max_batch_size": 16,
        "profiles": [
            {"opt_batch": 4, "shapes": {"input": {"min": [3, 4, 4], "opt": [3, 8, 8], "max": [3, 16, 16]}}},
            {
                "opt_batch": 8,
                "shapes": {"input": {"min": [3, 32, 32], "opt": [3, 32, 32], "max": [3, 64, 64]}},
            },
        ],
        "precisions": ["fp32", "fp16", "int8"],
        "calibration": {"data": "calib.npz"},
        "evaluation": {"data": "eval.npz"},
        "tolerances": {
            "fp32": {"min_cosine": 0.9999},
            "fp16": {"min_cosine": 0.999},
            "int8": {"mean_cosine": 0.99},
        },
        "engine": {"workspace_mib": 512, "optimization_level": 4, "hardware_compatibility": "ampere_plus"},
    }
    raw.update(changes)
    return ModelSpec.model_validate(raw)


def fixed_model() -> ModelSpec:
    """:func:`tiny_model` on 3x8x8 images without batching: every shape fixed, no profile."""
    fixed = {"dtype": "FP32", "dims": [3, 8, 8]}
    return tiny_model(
        max_batch_size=0,
        profiles=[],
        inputs=[{"name": "input", **fixed}],
        outputs=[{"name": "logits", **fixed}],
        engine={"int8_mode": "calibrator"},
    )


def eval_inputs(samples: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((samples, 3, 8, 8)).astype(np.float32)}
