"""The memory estimator on a tiny ONNX model: weights by precision, activations from shape inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.estimate.graph import activation_peak, count_params, io_bytes, natural_bytes
from builder.estimate.plan import (
    ARENA_GROWTH,
    GIB,
    MIB,
    SERVER_BASE,
    SERVER_IO_COPIES,
    STUB_BASE,
    CpuServing,
    advise,
    core_rows,
    elem_bytes_for,
    max_shapes,
)
from builder.spec import ModelSpec, Precision, Variant


def mlp() -> onnx.ModelProto:
    """x[N,16] -> MatMul(16x32) -> Add(32) -> Relu -> MatMul(32x10) -> y[N,10]."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.random((16, 32), dtype=np.float32), "w1"),
        numpy_helper.from_array(rng.random(32, dtype=np.float32), "b1"),
        numpy_helper.from_array(rng.random((32, 10), dtype=np.float32), "w2"),
        numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape"),  # not a parameter
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"]),
        helper.make_node("Add", ["h1", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def spec(**kw: object) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "mlp",
            "source": "m.onnx",
            "max_batch_size": 8,
            "inputs": [{"name": "x", "dtype": "FP32", "dims": [16]}],
            "outputs": [{"name": "y", "dtype": "FP32", "dims": [10]}],
            "precisions": ["fp32", "fp16"],
            "evaluation": {"data": "e.npz"},
            "tolerances": {"fp32": {"min_cosine": 0.99}, "fp16": {"min_cosine": 0.99}},
            **kw,
        }
    )


def test_params_count_float_initializers_only() -> None:
    assert count_params(mlp()) == 16 * 32 + 32 + 32 * 10


def test_activation_peak_from_shape_inference() -> None:
    # batch 8, 4 bytes: live x (512) + h1 (1024) at the first MatMul; then two [8,32] at a time
    assert activation_peak(mlp(), {"x": [8, 16]}, lambda _: 4) == 2 * 8 * 32 * 4
    assert activation_peak(mlp(), {"x": [32, 16]}, lambda _: 2) == 2 * 32 * 32 * 2
    assert io_bytes(mlp(), {"x": [8, 16]}, natural_bytes) == 8 * 16 * 4 + 8 * 10 * 4


def test_rows_weights_by_precision_and_instances(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), str(path))
    model = spec(instances={"count": 2})
    rows = core_rows(model, {Precision.FP32: path}, Variant(Precision.FP32))
    by = {(r.device, r.variant): r for r in rows}
    params = 864
    assert by["cpu", "fp32"].weights == params * 4
    assert by["cpu", "fp16"].weights == params * 2
    assert by["gpu", "fp16"].activations == 2 * 8 * 32 * 2  # fp16 activations on the GPU
    # ORT's CPU kernels compute in fp32; its arena holds up to twice the live peak
    assert by["cpu", "fp16"].activations == ARENA_GROWTH * 2 * 8 * 32 * 4
    cpu = by["cpu", "fp32"]
    assert cpu.instances == 2
    assert cpu.total == (
        SERVER_BASE + 2 * (STUB_BASE + cpu.weights + cpu.activations + cpu.io) + SERVER_IO_COPIES * cpu.io
    )
    assert by["cpu", "fp32"].served and not by["cpu", "fp16"].served
    assert max_shapes(model) == {"x": [8, 16]}


def test_a_published_variant_counts_its_runtimes_stub_at_its_built_instances(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), str(path))
    model = spec(instances={"count": 1})
    served = Variant(Precision.FP32, "openvino")
    rows = core_rows(model, {Precision.FP32: path}, served, [CpuServing(served, 2)])
    by = {(r.device, r.variant): r for r in rows}
    ov = by["cpu", "fp32_openvino"]
    assert ov.served and ov.instances == 2 and ov.stub == served.cpu_runtime.stub_memory != STUB_BASE
    per_instance = ov.stub + ov.weights + ov.activations + ov.io
    assert ov.total == SERVER_BASE + 2 * per_instance + SERVER_IO_COPIES * ov.io
    # a precision no published variant runs: on the default runtime at the spec's instances
    fp16 = by["cpu", "fp16"]
    assert not fp16.served and fp16.instances == 1 and fp16.stub == STUB_BASE
    assert ("cpu", "fp32") not in by and by["gpu", "fp32"].instances == 1


def test_the_plan_reads_each_published_variants_runtime_and_instances_from_the_manifest() -> None:
    import json

    from builder.estimate.compare import published

    entry = {
        "served": "fp32_openvino",
        "published": {"mlp": "fp32_openvino", "mlp_fp32": "fp32", "mlp_fp16": "fp16"},
        "served_at": {"instances": 2, "threads": 1},
        "published_at": {"mlp": {"instances": 2}, "mlp_fp32": {"instances": 1, "threads": 2}},
    }
    model = spec(instances={"count": 4})
    assert published(model, json.loads(json.dumps(entry))) == [
        CpuServing(Variant(Precision.FP32, "openvino"), 2),
        CpuServing(Variant(Precision.FP32), 1),
        CpuServing(Variant(Precision.FP16), 4),  # nothing recorded: the spec's
    ]


def test_elem_bytes() -> None:
    assert elem_bytes_for("gpu", Precision.INT8)(TensorProto.FLOAT) == 1
    assert elem_bytes_for("cpu", Precision.FP16)(TensorProto.FLOAT16) == 4
    assert elem_bytes_for("cpu", Precision.FP16)(TensorProto.INT64) == 8


def test_advice_when_the_plan_does_not_fit(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), str(path))
    model = spec(instances={"count": 2})
    rows = core_rows(model, {Precision.FP32: path}, Variant(Precision.FP32))
    ok = advise(rows, 8 * GIB, "cpu", {"mlp": model})
    assert len(ok) == 1 and ok[0].endswith("fits")
    tight = advise(rows, 100 * MIB, "cpu", {"mlp": model})
    assert "DOES NOT FIT" in tight[0]
    text = "\n".join(tight)
    assert "instances: mlp 2 -> 1" in text and "max shape: mlp max_batch_size 8 -> 4" in text
    assert "precision: mlp fp32 -> fp16" in text  # the served fp32 has a smaller variant
    gpu = advise(rows, 1, "gpu", {"mlp": model})
    assert "DOES NOT FIT" in gpu[0] and "plan" in gpu[0]  # the gpu plan already takes fp16


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_table_has_every_variant(tmp_path: Path, device: str) -> None:
    from builder.estimate.plan import table

    path = tmp_path / "m.onnx"
    onnx.save(mlp(), str(path))
    rows = core_rows(spec(), {Precision.FP32: path}, Variant(Precision.FP32))
    assert sum(f"| {device} |" in line for line in table(rows).splitlines()) == 2


def test_measurement_sends_one_concurrent_request_per_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.estimate import rss

    calls: list[str] = []
    monkeypatch.setattr(rss, "max_shape_request", lambda model, url, name: calls.append(name))
    rss.max_shape_requests(rss.Load(spec(), 2), "http://localhost:1", "m", rounds=3)
    assert calls == ["m"] * 6
