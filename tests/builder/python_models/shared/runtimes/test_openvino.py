"""OpenVINO as a runtime (shared/runtimes/openvino.py): the precision it really computes in, read
back; its compile cache; its container backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder.host import cpu_has_native_bf16
from builder.python_models.shared.runtimes import Knobs, RuntimeRefused, openvino
from tests.builder.python_models.shared.runtimes.graphs import matmul

OV = openvino.OpenVino()


def test_openvino_reads_back_the_precision_this_cpu_computes(tmp_path: Path) -> None:
    """bf16 where the CPU has AVX-512 BF16 or AMX, else OpenVINO stays at f32; fp32 is forced f32."""
    path = matmul(tmp_path / "model.onnx")
    assert OV.open(path, "fp32", {"intra_op_threads": "1"}).computed_in == "f32"
    assert OV.open(path, "bf16", {"intra_op_threads": "1"}).computed_in == (
        "bf16" if cpu_has_native_bf16() else "f32"
    )


def test_bf16_needs_the_cpu_flags_that_run_it() -> None:
    assert OV.missing_flags("bf16", frozenset({"avx2"})) == {"avx512_bf16", "amx_bf16"}
    assert not OV.missing_flags("bf16", frozenset({"avx2", "amx_bf16"}))
    assert not OV.missing_flags("fp32", frozenset())


def test_a_graph_openvino_refuses_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not a graph")
    with pytest.raises(RuntimeRefused, match="OpenVINO cannot compile the graph"):
        OV.open(broken, "fp32", {})


def test_a_read_only_version_folder_compiles_without_a_cache(tmp_path: Path, monkeypatch: Any) -> None:
    path = matmul(tmp_path / "model.onnx")
    monkeypatch.setattr(openvino.os, "access", lambda *_: False)
    assert openvino._cache(path, {"openvino_cache": "cache"}) is None
    assert openvino._cache(path, {}) is None


def test_only_a_served_model_keeps_a_compile_cache() -> None:
    assert OV.parameters(Knobs())["openvino_cache"] == "openvino_cache"
    assert "openvino_cache" not in OV.parameters(Knobs(), served=False)


def test_the_container_serves_bf16_padded_to_full_batches_and_only_where_pinned() -> None:
    backend = OV.container(Knobs(threads=2), 8)
    assert backend.backend == "openvino" and backend.precisions == {"bf16"} and backend.pinned_only
    assert backend.parameters == {
        "HINT_BF16": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
        "ENABLE_BATCH_PADDING": "YES", "INFERENCE_NUM_THREADS": "2",
    }  # fmt: skip
    assert "ENABLE_BATCH_PADDING" not in OV.container(Knobs(), 0).parameters
