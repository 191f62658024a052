"""The onnx_runner's runtimes (``runtimes/``): ONNX Runtime's threads and spinning, OpenVINO's
precision read back, and both answering the same graph alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builder.python_models.onnx_runner.runtimes import onnxruntime as ort_runtime
from builder.python_models.onnx_runner.runtimes import open_session
from builder.stages.inputs import cpu_has_native_bf16


def test_spinning_follows_the_parameter() -> None:
    one = {"instance_group": [{"count": 1}]}
    two = {"instance_group": [{"count": 2}]}
    assert not ort_runtime.spinning({"allow_spinning": "0"}, one)
    assert ort_runtime.spinning({"allow_spinning": "true"}, two)


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 8, 64])
def test_unset_spinning_follows_this_machines_cores(monkeypatch: Any, cores: int) -> None:
    """Unset, workers spin only where the instances' threads leave a core free, read from the
    same os.cpu_count() the runner sizes its threads by."""
    monkeypatch.setattr(ort_runtime.os, "cpu_count", lambda: cores)
    one = {"instance_group": [{"count": 1}]}
    assert ort_runtime.spinning({"intra_op_threads": "1"}, one) is (cores > 1)
    assert ort_runtime.spinning({"intra_op_threads": "2"}, one) is (cores > 2)
    assert not ort_runtime.spinning({}, one)  # unset threads take every core: none is left
    two = {"instance_group": [{"count": 2}]}
    assert ort_runtime.spinning({"intra_op_threads": "1"}, two) is (cores > 2)


def _entry(options: Any, key: str) -> str | None:
    try:
        return str(options.get_session_config_entry(key))
    except RuntimeError:  # not set
        return None


def test_session_options_follow_the_spinning_parameters() -> None:
    one = {"instance_group": [{"count": 1}]}
    sleeping = ort_runtime.session_options({"allow_spinning": "0", "stop_spinning": "1"}, one)
    assert _entry(sleeping, "session.intra_op.allow_spinning") == "0"
    assert _entry(sleeping, "session.force_spinning_stop") is None
    spinning = ort_runtime.session_options({"allow_spinning": "1", "intra_op_threads": "2"}, one)
    assert _entry(spinning, "session.intra_op.allow_spinning") is None
    assert _entry(spinning, "session.force_spinning_stop") is None
    assert spinning.intra_op_num_threads == 2
    during_runs = ort_runtime.session_options({"allow_spinning": "1", "stop_spinning": "true"}, one)
    assert _entry(during_runs, "session.force_spinning_stop") == "1"


def test_a_spare_core_is_one_the_sessions_threads_leave() -> None:
    assert ort_runtime.spare_core(1, 1, 2) and ort_runtime.spare_core(2, 1, 3)
    assert not ort_runtime.spare_core(1, 2, 2) and not ort_runtime.spare_core(2, 1, 2)


def _matmul(path: Path) -> Path:
    """y = x @ w with a dynamic batch: a graph every runtime runs."""
    w = np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, [16, 8], w.ravel())],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


ONE = {"instance_group": [{"count": 1}]}


def test_openvino_answers_as_onnx_runtime_and_caches_its_compilation(tmp_path: Path) -> None:
    path = _matmul(tmp_path / "model.onnx")
    x = np.random.default_rng(1).normal(size=(3, 16)).astype(np.float32)
    ort = open_session(path, {}, ONE)
    ov = open_session(path, {"runtime": "openvino", "precision": "fp32", "openvino_cache": "cache"}, ONE)
    assert ov.inputs == [("x", np.float32)]
    assert np.allclose(ov.run(["y"], {"x": x})[0], ort.run(["y"], {"x": x})[0], atol=1e-5)
    assert any((tmp_path / "cache").iterdir()), "a restart reads the compiled blob back"


def test_openvino_reads_back_the_precision_this_cpu_computes(tmp_path: Path) -> None:
    """bf16 where the CPU has AVX-512 BF16 or AMX, else OpenVINO stays at f32; fp32 is forced f32."""
    from builder.python_models.onnx_runner.runtimes.openvino import compile_graph

    path = _matmul(tmp_path / "model.onnx")
    assert compile_graph(path, "fp32", 1).computed_in == "f32"
    assert compile_graph(path, "bf16", 1).computed_in == ("bf16" if cpu_has_native_bf16() else "f32")


def test_a_read_only_version_folder_compiles_without_a_cache(tmp_path: Path, monkeypatch: Any) -> None:
    from builder.python_models.onnx_runner.runtimes import openvino

    path = _matmul(tmp_path / "model.onnx")
    monkeypatch.setattr(openvino.os, "access", lambda *_: False)
    assert openvino._cache(path, {"openvino_cache": "cache"}) is None
    assert openvino._cache(path, {}) is None
