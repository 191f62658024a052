"""bench.cpu_runtimes: which published variant each side of the comparison runs, and its rows."""

from pathlib import Path
from typing import Any

from bench.cpu_runtimes import fastest_on, graph_of, path_split, published


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
    spec = {"targets": {"local": {"serve": ["fp32", "bf16"]}}}
    assert fastest_on(ENTRY, spec, "onnxruntime") == "fp32"
    assert fastest_on(ENTRY, spec, "openvino") == "bf16_openvino"
    assert fastest_on(ENTRY, {"targets": {"local": {"serve": "int8"}}}, "onnxruntime") is None


def test_a_variant_published_only_on_another_runtime_runs_the_graph_of_its_precision(tmp_path: Path) -> None:
    # The local target publishes ONNX Runtime's variants only beside the served one.
    entry = {
        "served": "fp32",
        "published": {"m": "fp32", "m_int8": "int8"},
        "verification": {
            "fp32": report("onnxruntime", 10.0),
            "int8": report("onnxruntime", 6.0),
            "int8_openvino": report("openvino", 2.0),
            "bf16_openvino": report("openvino", 1.0, passed=False),
        },
    }
    assert fastest_on(entry, {}, "openvino") == "int8_openvino"
    assert graph_of(entry, "int8_openvino") == "m_int8"
    assert graph_of(entry, "bf16_openvino") == "m"  # bf16 runs the FP32 graph
    assert graph_of({**entry, "published": {"m": "fp32"}}, "int8_openvino") is None
    side = published(tmp_path, "m", "int8_openvino", entry)
    assert (side.name, side.runtime, side.folder) == ("m_int8", "openvino", tmp_path / "m_int8")
    assert side.params == {"precision": "int8", "runtime": "openvino"}
    assert published(tmp_path, "m", "int8", entry).params == {}


def test_the_c1_row_splits_the_served_p50_into_the_runtime_call_and_the_serving_path() -> None:
    served = {"points": {"1": {"p50_ms": 4.67}}, "runner_ms": {"run": {"p50": 3.37}}}
    assert path_split(served) == "; of its 4.67 ms p50, 3.37 ms runtime call, 1.30 ms serving path"
    assert path_split({"points": served["points"], "runner_ms": {"executes": 0}}) == ""


def test_the_sized_rows_hold_the_served_model_to_the_fastest_in_process_with_every_core() -> None:
    from bench.cpu_runtimes import rows_of, sized

    def point(rate: float, p50: float) -> dict[str, float]:
        return {"throughput": rate, "p50_ms": p50}

    fastest = {"model": "m", "variant": "bf16_openvino", "runtime": "openvino", "threads": 2, "c1_ms": 1.9,
               "best_batch": 16, "best_rate": 500.0}  # fmt: skip
    record = {
        "served": {"variant": "int8_openvino", "points": {"1": point(330.0, 3.0), "8": point(380.0, 20.0)}},
        "ort_served": {"variant": "fp32", "points": {"1": point(100.0, 9.0), "8": point(120.0, 60.0)}},
        "in_process": {"served": {"best": {"1": 500.0, "8": 600.0}}},
        "every_core": {"openvino": fastest, "onnxruntime": {**fastest, "c1_ms": 4.0, "variant": "fp32"}},
        "served_vs_ort_served": {"1": 3.3, "8": 3.2}, "served_vs_ort_served_best": 3.2,
    }  # fmt: skip
    record["sized"] = s = sized(record)
    assert s["fastest"]["variant"] == "bf16_openvino" and abs(s["c1_extra_ms"] - 1.1) < 1e-9
    assert abs(s["serving_path_ms"] - 1.0) < 1e-9 and abs(s["c8_share"] - 0.76) < 1e-9
    c1, c8, _ = rows_of("resnet18", record)
    assert c1.met and c1.target == "<= +1.2 ms" and "the serving path 1.00 ms, 33 %" in c1.measured
    assert c8.met and c8.measured.startswith("0.76 (380 / 500 inf/s at batch 16")
