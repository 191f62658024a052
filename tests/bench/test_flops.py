"""bench.flops: the FLOPs of a graph counted from its shapes, and a CPU's peak from its flags."""

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bench.flops import clock_ghz, model_flops, peak, variant_precision


def conv_matmul_gemm(path: Path) -> Path:
    """[1,3,8,8] -> Conv 4x3x3x3 (pad 1, [1,4,8,8]) -> grouped Conv 4x2x1x1 (group 2) -> Flatten
    [1,256] -> MatMul [256,10] -> Gemm transB [5,10]: a graph whose MACs are counted by hand."""
    weights = [
        helper.make_tensor("w1", TensorProto.FLOAT, [4, 3, 3, 3], [0.0] * 108),
        helper.make_tensor("w2", TensorProto.FLOAT, [4, 2, 1, 1], [0.0] * 8),
        helper.make_tensor("m", TensorProto.FLOAT, [256, 10], [0.0] * 2560),
        helper.make_tensor("g", TensorProto.FLOAT, [5, 10], [0.0] * 50),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], group=2),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["mm"]),
        helper.make_node("Gemm", ["mm", "g"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], weights,
    )  # fmt: skip
    out = path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(out))
    return out


def test_flops_are_twice_the_macs_of_conv_matmul_and_gemm_at_the_given_batch(tmp_path: Path) -> None:
    model = conv_matmul_gemm(tmp_path)
    # Conv: 4*8*8 outputs x 3*3*3; grouped Conv: 4*8*8 x 2 (C_in / group); MatMul 10 x 256; Gemm 5 x 10.
    macs = 256 * 27 + 256 * 2 + 10 * 256 + 5 * 10
    assert model_flops(model, {"x": [1, 3, 8, 8]}) == 2 * macs
    assert model_flops(model, {"x": [4, 3, 8, 8]}) == 4 * 2 * macs


def test_the_peak_comes_from_the_fastest_unit_the_flags_name() -> None:
    amx = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"}
    bf16, int8, fp32 = (peak(amx, p, 2, 2.0) for p in ("bf16", "int8", "fp32"))
    assert bf16 is not None and bf16.flops_per_s == 1024 * 2 * 2.0e9
    assert int8 is not None and (int8.unit, int8.flops_per_cycle_core) == ("amx_int8", 2048)
    assert fp32 is not None and (fp32.unit, fp32.flops_per_cycle_core) == ("avx512f", 64)
    avx2 = peak({"avx2"}, "fp32", 4, 3.0)
    assert (
        avx2 is not None and avx2.how() == "fp32 on avx2: 32 FLOP/cycle/core x 4 cores x 3 GHz = 384 GFLOP/s"
    )
    assert peak(set(), "fp32", 2, 2.0) is None


def test_the_clock_is_read_from_cpuinfo() -> None:
    assert clock_ghz("processor\t: 0\ncpu MHz\t\t: 2599.998\n") == pytest.approx(2.599998)
    assert clock_ghz("processor\t: 0\n") is None


@pytest.mark.parametrize(
    ("variant", "computes"),
    [("int8_openvino", "int8"), ("int8_dynamic", "int8"), ("bf16_openvino", "bf16"), ("fp16", "fp32"),
     ("fp32_openvino", "fp32")],
)  # fmt: skip
def test_a_variant_computes_in_its_precision(variant: str, computes: str) -> None:
    assert variant_precision(variant) == computes
