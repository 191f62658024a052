"""builder.sources.factory: a factory is keyed by its module's code, and a torch module it returns
is run for the reference (an ONNX graph it returns is its own)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from builder.sources.base import InitRequest
from builder.sources.factory import FactorySource
from tests.builder.sources.entries import model

SOURCE = FactorySource()
FACTORIES = """
import torch


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def double():
    return Double()


def graph():
    from onnx import TensorProto, helper
    node = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    return helper.make_model(helper.make_graph([node], "g", [x], [y]))
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "source_test_factories.py").write_text(textwrap.dedent(FACTORIES))
    return tmp_path


def reference(source: str, x: NDArray[Any], spec_dir: Path) -> dict[str, NDArray[Any]] | None:
    spec_file, log = spec_dir / "models.yaml", spec_dir / "reference.log"
    return SOURCE.reference(model(source), {"x": x}, spec_dir=spec_dir, spec_file=spec_file, log=log)


def test_a_torch_module_is_run_for_the_reference(spec_dir: Path) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = reference("source_test_factories:double", x, spec_dir)
    assert out is not None
    np.testing.assert_array_equal(out["y"], x * 2)


def test_an_onnx_graph_is_its_own_reference(spec_dir: Path) -> None:
    assert reference("source_test_factories:graph", np.zeros((1, 4), np.float32), spec_dir) is None


def test_the_fingerprint_follows_the_factorys_module(spec_dir: Path) -> None:
    entry = model("source_test_factories:double")
    before = SOURCE.fingerprint(entry, spec_dir)
    assert SOURCE.fingerprint(entry, spec_dir) == before
    module = spec_dir / "source_test_factories.py"
    module.write_text(module.read_text() + "\n# edited\n")
    assert SOURCE.fingerprint(entry, spec_dir) != before


def test_init_reads_no_path(spec_dir: Path) -> None:
    module = spec_dir / "source_test_factories.py"
    assert SOURCE.init_entry(module, InitRequest(), spec_dir / "models.yaml") is None
