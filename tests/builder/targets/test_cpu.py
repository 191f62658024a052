"""The cpu target (builder/targets/cpu.py): each runtime on the container backend its module names;
OpenVINO's (which pads every batch to max_batch_size) served under the model's name only where the
spec pins it."""

from __future__ import annotations

from pathlib import Path

from builder.spec import Precision, Variant
from builder.targets import get
from tests.builder.targets.builds import BF16, FP32, OV, built, loaded

CPU = get("cpu")


def test_it_serves_onnx_runtime_and_openvinos_bf16_alone(tmp_path: Path) -> None:
    assert CPU.serves(Variant(FP32)) and CPU.serves(Variant(Precision.INT8_DYNAMIC))
    assert CPU.serves(Variant(BF16, OV)) and not CPU.serves(Variant(FP32, OV))


def test_openvino_serves_under_the_models_name_only_where_pinned(tmp_path: Path) -> None:
    timings = {Variant(FP32): 10.0, Variant(FP32, OV): 8.0, Variant(BF16, OV): 2.0}
    assert CPU.choose_served(built(loaded(tmp_path), timings), tmp_path / "models.yaml") == Variant(FP32)
    pinned = built(loaded(tmp_path, serve={"runtime": "openvino"}), timings)
    assert CPU.choose_served(pinned, tmp_path / "models.yaml") == Variant(BF16, OV)


def test_each_runtime_gets_its_container_backend(tmp_path: Path) -> None:
    spec = loaded(tmp_path, serve={"threads": 2})
    openvino = CPU.core_config(spec, "m_bf16_openvino", Variant(BF16, OV))
    assert openvino.backend == "openvino" and openvino.default_model_filename == "model.onnx"
    assert {k: v.string_value for k, v in openvino.parameters.items()} == {
        "HINT_BF16": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
        "ENABLE_BATCH_PADDING": "YES", "INFERENCE_NUM_THREADS": "2",
    }  # fmt: skip
    onnx = CPU.core_config(spec, "m", Variant(FP32))
    assert onnx.platform == "onnxruntime_onnx" and not onnx.backend
    assert {k: v.string_value for k, v in onnx.parameters.items()} == {"intra_op_thread_count": "2"}
