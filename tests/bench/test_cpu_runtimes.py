"""bench.cpu_runtimes: which published variant each side of the comparison runs."""

from typing import Any

from bench.cpu_runtimes import fastest_on


def report(runtime: str, ms: float | None, passed: bool = True) -> dict[str, Any]:
    return {"runtime": runtime, "ms_per_sample": ms, "passed": passed}


ENTRY = {
    "served": "bf16_openvino",
    "published": {
        "m": "bf16_openvino",
        "m_fp32": "fp32",
        "m_fp16": "fp16",
        "m_int8_openvino": "int8_openvino",
    },
    "verification": {
        "fp32": report("onnxruntime", 10.0),
        "fp16": report("onnxruntime", 6.0),
        "int8": report("onnxruntime", 1.0, passed=False),  # fastest, but failed: not published
        "bf16_openvino": report("openvino", 3.0),
        "int8_openvino": report("openvino", 2.0),
    },
}


def test_each_runtime_runs_its_fastest_variant_that_verified_and_is_published() -> None:
    assert fastest_on(ENTRY, {}, "onnxruntime") == "fp16"
    assert fastest_on(ENTRY, {}, "openvino") == "int8_openvino"


def test_the_specs_serve_choices_bound_what_onnx_runtime_served_before() -> None:
    spec = {"serve": {"local": ["fp32", "bf16"]}}
    assert fastest_on(ENTRY, spec, "onnxruntime") == "fp32"
    assert fastest_on(ENTRY, spec, "openvino") == "bf16_openvino"
    assert fastest_on(ENTRY, {"serve": {"local": "int8"}}, "onnxruntime") is None
