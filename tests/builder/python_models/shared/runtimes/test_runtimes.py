"""The registry of CPU runtimes (shared/runtimes/__init__.py): every runtime opened the one way, a
served model's session from its config's parameters, both runtimes answering a graph alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from builder.python_models import model_sources, package
from builder.python_models.shared import runtimes
from builder.python_models.shared.runtimes import RUNTIMES, CpuRuntime, Runs, Session, open_served, runtime
from builder.spec import Precision, Variant
from tests.builder.python_models.shared.runtimes.graphs import matmul

ONE = {"instance_group": [{"count": 1}]}


def test_openvino_answers_as_onnx_runtime_and_caches_its_compilation(tmp_path: Path) -> None:
    path = matmul(tmp_path / "model.onnx")
    x = np.random.default_rng(1).normal(size=(3, 16)).astype(np.float32)
    ort = open_served(path, {}, ONE)
    ov = open_served(path, {"runtime": "openvino", "precision": "fp32", "openvino_cache": "cache"}, ONE)
    assert ov.inputs == [("x", np.float32)] and ort.inputs == [("x", np.float32)]
    assert np.allclose(ov.run(["y"], {"x": x})[0], ort.run(["y"], {"x": x})[0], atol=1e-5)
    assert any((tmp_path / "cache").iterdir()), "a restart reads the compiled blob back"


def test_an_unknown_runtime_names_the_registered_ones() -> None:
    with pytest.raises(ValueError, match="unknown runtime 'tvm' \\(runtimes: onnxruntime, openvino\\)"):
        runtime("tvm")


def test_the_served_models_carry_the_runtimes_package() -> None:
    """onnx_runner and onnx_sequence link to shared/runtimes: the repository gets every module."""
    for name in ("onnx_runner", "onnx_sequence"):
        sources = model_sources(package(name))
        assert {f"runtimes/{m}.py" for m in ("__init__", "base", "onnxruntime", "openvino")} <= set(sources)


class EchoRuntime(CpuRuntime):
    """A third runtime, as docs/architecture.md shows adding one: one module and one registry line."""

    name = "echo"
    distribution = "numpy"
    precisions: ClassVar[dict[str, Runs]] = {"fp32": Runs()}

    def open(self, model: Path | bytes, precision: str, params: Any, *, instances: int = 1,
             quiet: bool = False) -> Session:  # fmt: skip
        class Echo:
            def __init__(self) -> None:
                self.inputs: list[tuple[str, Any]] = [("x", np.float32)]
                self.output_names = ["y"]
                self.computed_in: str | None = None

            def run(self, names: Any, feed: Any) -> list[Any]:
                return [feed["x"]]

        return Echo()


def test_a_registered_runtime_is_a_variant_the_spec_and_the_stages_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(RUNTIMES, "echo", EchoRuntime())
    variant = Variant.parse("fp32_echo")
    assert variant == Variant(Precision.FP32, "echo") and variant.cpu_runtime.version() != "absent"
    x = np.ones((2, 16), np.float32)
    served = runtimes.open_served(tmp_path / "model.onnx", {"runtime": "echo"}, ONE)
    assert served.run(None, {"x": x})[0] is x
