from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.errors import SpecError
from builder.spec import ModelSpec, Precision, TensorSpec, Tolerance
from builder.stages.runtimes import run_onnx
from builder.stages.verify import compare, time_variant, verify_variant

RNG = np.random.default_rng(2)
W = RNG.normal(0, 0.5, (6, 4)).astype(np.float32)
LOGITS = TensorSpec(name="logits", dtype="FP32", dims=[4])
IDS = TensorSpec(name="ids", dtype="INT64", dims=[2])


def linear(path: Path, batch: bool = True) -> Path:
    """x [N,6] -> MatMul W -> logits [N,4]; ids = ArgMax(logits) kept as [N,1] int64 (or no N)."""
    n: list[int | str] = ["N"] if batch else []
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=-1, keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*n, 6])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [*n, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [*n, 1]),
        ],
        [numpy_helper.from_array(W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # onnx writes a newer IR than ONNX Runtime reads
    onnx.save(model, str(path))
    return path


def spec(max_batch_size: int = 4, **tolerance: Any) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "lin",
            "source": "zoo.lin:build",
            "inputs": [{"name": "x", "dtype": "FP32", "dims": [6]}],
            "outputs": [
                {"name": "logits", "dtype": "FP32", "dims": [4]},
                {"name": "ids", "dtype": "INT64", "dims": [1]},
            ],
            "max_batch_size": max_batch_size,
            "precisions": ["fp32", "fp16"],
            "evaluation": {"data": "eval.npz"},
            "tolerances": {"fp32": {"min_cosine": 0.9999}, "fp16": tolerance or {"min_cosine": 0.999}},
        }
    )


def logits(n: int = 10) -> np.ndarray:
    return RNG.standard_normal((n, 4)).astype(np.float32)


def test_identical_outputs_pass_with_perfect_metrics() -> None:
    ref = {"logits": logits()}
    metrics, failures = compare(ref, {"logits": ref["logits"].copy()}, Tolerance(min_cosine=1.0), [LOGITS])
    assert failures == []
    m = metrics["logits"]
    assert m.min_cosine == pytest.approx(1.0) and m.mean_cosine == pytest.approx(1.0)
    assert m.max_abs == 0.0 and m.top1 == 1.0 and m.exact is None


def test_metrics_are_per_sample() -> None:
    ref = logits(4)
    cand = ref.copy()
    cand[2] = -cand[2]  # one sample flipped: cosine -1 there, 1 elsewhere
    m = compare({"logits": ref}, {"logits": cand}, Tolerance(mean_cosine=0.0), [LOGITS])[0]["logits"]
    assert m.min_cosine == pytest.approx(-1.0)
    assert m.mean_cosine == pytest.approx(0.5)
    assert m.max_abs == pytest.approx(float(np.abs(2 * ref[2]).max()))
    assert m.top1 == pytest.approx(0.75)


def test_threshold_failures_name_output_value_and_limit() -> None:
    ref = logits(20)
    cand = ref + RNG.normal(0, 0.5, ref.shape).astype(np.float32)
    tol = Tolerance(min_cosine=0.999, mean_cosine=0.999, max_abs=0.01, top1=1.0)
    metrics, failures = compare({"logits": ref}, {"logits": cand}, tol, [LOGITS])
    m = metrics["logits"]
    assert failures == [
        f"output 'logits' min_cosine {m.min_cosine:.4f} < 0.999 allowed",
        f"output 'logits' mean_cosine {m.mean_cosine:.4f} < 0.999 allowed",
        f"output 'logits' top1 {m.top1:.4f} < 1.0 allowed",
        f"output 'logits' max_abs {m.max_abs:.4g} > 0.01 allowed",
    ]


def test_only_set_thresholds_are_checked() -> None:
    ref = logits()
    cand = ref + 0.5
    assert compare({"logits": ref}, {"logits": cand}, Tolerance(max_abs=0.6), [LOGITS])[1] == []
    assert compare({"logits": ref}, {"logits": cand}, Tolerance(max_abs=0.4), [LOGITS])[1] != []


def test_integer_outputs_compare_exactly() -> None:
    ref = {"logits": logits(), "ids": np.arange(20).reshape(10, 2)}
    cand = {"logits": ref["logits"], "ids": ref["ids"].copy()}
    cand["ids"][3, 1] += 1
    metrics, failures = compare(ref, cand, Tolerance(exact=True), [LOGITS, IDS])
    assert metrics["ids"].exact is False and metrics["ids"].min_cosine is None
    assert failures == ["output 'ids' differs from the reference (exact required)"]
    assert compare(ref, cand, Tolerance(min_cosine=0.9), [LOGITS, IDS])[1] == []


def test_tolerance_outputs_restrict_the_check() -> None:
    ref = {"logits": logits(), "ids": np.zeros((10, 2), np.int64)}
    cand = {"logits": -ref["logits"], "ids": ref["ids"] + 1}
    tol = Tolerance(exact=True, outputs=["ids"])
    assert compare(ref, cand, tol, [LOGITS, IDS])[1] == [
        "output 'ids' differs from the reference (exact required)"
    ]


def test_nan_in_candidate_always_fails() -> None:
    ref = logits()
    cand = ref.copy()
    cand[1, 2] = np.nan
    cand[4, 0] = np.inf
    metrics, failures = compare({"logits": ref}, {"logits": cand}, Tolerance(max_abs=1e9), [LOGITS])
    assert "output 'logits' has 2 NaN/inf values where the reference is finite" in failures
    assert any("max_abs nan" in f for f in failures)
    assert metrics["logits"].min_cosine == -1.0


def test_missing_and_misshapen_outputs_fail() -> None:
    ref = {"logits": logits(), "ids": np.zeros((10, 1), np.int64)}
    cand = {"logits": logits()[:, :3]}
    failures = compare(ref, cand, Tolerance(min_cosine=0.5, exact=True), [LOGITS, IDS])[1]
    assert failures == ["output 'logits' has shape [10, 3], reference [10, 4]", "output 'ids' is missing"]
    no_ref = compare({}, cand, Tolerance(min_cosine=0.5, outputs=["logits"]), [LOGITS, IDS])[1]
    assert no_ref == ["output 'logits' has no reference to compare against"]


@pytest.mark.parametrize("batch_size", [1, 3, 4, 100])
def test_run_onnx_batches_and_concatenates(tmp_path: Path, batch_size: int) -> None:
    x = RNG.standard_normal((10, 6)).astype(np.float32)
    out = run_onnx(linear(tmp_path / "m.onnx"), {"x": x}, batch_size=batch_size)
    np.testing.assert_allclose(out["logits"], x @ W, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["ids"][:, 0], np.argmax(x @ W, axis=1))


def test_run_onnx_batch_size_zero_feeds_samples_without_batch_axis(tmp_path: Path) -> None:
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    out = run_onnx(linear(tmp_path / "m.onnx", batch=False), {"x": x}, batch_size=0)
    assert out["logits"].shape == (5, 4) and out["ids"].shape == (5, 1)
    np.testing.assert_allclose(out["logits"], x @ W, rtol=1e-5, atol=1e-5)


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    y = x @ W
    return {"logits": y, "ids": np.argmax(y, axis=1)[:, None].astype(np.int64)}


def test_verify_variant_passes_and_reports(tmp_path: Path) -> None:
    x = RNG.standard_normal((9, 6)).astype(np.float32)
    report = verify_variant(spec(), Precision.FP16, linear(tmp_path / "m.onnx"), {"x": x}, reference(x))
    assert report.passed and report.failures == []
    assert report.metrics["logits"].min_cosine == pytest.approx(1.0, abs=1e-6)
    assert report.metrics["ids"].exact is True
    assert report.ms_per_sample is not None and report.ms_per_sample > 0
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["precision"] == "fp16" and data["passed"] is True
    assert set(data["metrics"]) == {"logits", "ids"}


def test_verify_variant_failures_are_prefixed_with_precision(tmp_path: Path) -> None:
    x = RNG.standard_normal((9, 6)).astype(np.float32)
    ref = reference(x)
    ref["logits"] = ref["logits"] + RNG.normal(0, 1.0, ref["logits"].shape).astype(np.float32)
    report = verify_variant(spec(), Precision.FP16, linear(tmp_path / "m.onnx"), {"x": x}, ref)
    assert not report.passed
    assert report.failures and all(f.startswith("fp16: output 'logits' min_cosine ") for f in report.failures)


def test_verify_variant_nan_metrics_serialise_as_null(tmp_path: Path) -> None:
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    x[0, 0] = np.nan
    ref = reference(np.nan_to_num(x))
    report = verify_variant(spec(max_abs=1.0), Precision.FP16, linear(tmp_path / "m.onnx"), {"x": x}, ref)
    assert not report.passed
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["metrics"]["logits"]["max_abs"] is None


def test_verify_variant_without_batch_axis(tmp_path: Path) -> None:
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    model = spec(max_batch_size=0)
    report = verify_variant(
        model, Precision.FP16, linear(tmp_path / "m.onnx", batch=False), {"x": x}, reference(x)
    )
    assert report.passed, report.failures


def test_unknown_tolerance_output_is_a_spec_error(tmp_path: Path) -> None:
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    model = spec(min_cosine=0.9, outputs=["nope"])
    with pytest.raises(SpecError) as info:
        verify_variant(model, Precision.FP16, linear(tmp_path / "m.onnx"), {"x": x}, reference(x))
    assert info.value.field == "tolerances.fp16" and info.value.model == "lin"


def test_time_variant_repeats_samples_up_to_opt_batch(tmp_path: Path) -> None:
    x = RNG.standard_normal((2, 6)).astype(np.float32)  # fewer than opt_batch (4)
    ms = time_variant(spec(), linear(tmp_path / "m.onnx"), {"x": x}, repeats=3)
    assert 0 < ms < 1000


def batch_scaled(path: Path) -> Path:
    """logits = x @ W / max|x| over the whole batch: one scale for the batch, as ONNX Runtime's
    dynamic INT8 takes, so a request's answer moves with its batch mates."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("ReduceMax", ["a"], ["m"], keepdims=0),
        helper.make_node("Div", ["y", "m"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=-1, keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 1]),
        ],
        [numpy_helper.from_array(W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_an_answer_that_moves_with_its_batch_mates_is_measured(tmp_path: Path) -> None:
    from builder.records import BATCH_INVARIANCE

    x = RNG.normal(size=(8, 6)).astype(np.float32) * np.linspace(0.1, 3, 8, dtype=np.float32)[:, None]
    steady = verify_variant(spec(8), Precision.FP32, linear(tmp_path / "m.onnx"), {"x": x}, reference(x))
    assert steady.batch_max_diff is not None and steady.batch_max_diff <= BATCH_INVARIANCE
    assert steady.batch_invariant
    scaled = batch_scaled(tmp_path / "s.onnx")
    moving = verify_variant(
        spec(8), Precision.FP32, scaled, {"x": x}, run_onnx(scaled, {"x": x}, batch_size=1)
    )
    assert moving.batch_max_diff is not None and moving.batch_max_diff > 0.1 and not moving.batch_invariant
    # Verified as it is served: each row alone, which is what its reference is here.
    assert moving.passed and moving.metrics["logits"].max_abs == 0.0


def test_a_model_that_never_batches_is_not_checked_for_batch_mates(tmp_path: Path) -> None:
    x = RNG.normal(size=(4, 6)).astype(np.float32)
    report = verify_variant(spec(0), Precision.FP32, linear(tmp_path / "m.onnx", batch=False), {"x": x},
                            reference(x))  # fmt: skip
    assert report.batch_max_diff is None and report.batch_invariant


def test_openvino_variants_are_verified_on_openvino_and_say_what_they_computed(tmp_path: Path) -> None:
    from builder.errors import ModelRefused
    from builder.host import cpu_has_native_bf16
    from builder.spec import Variant

    x = RNG.normal(size=(8, 6)).astype(np.float32)
    path = linear(tmp_path / "m.onnx")
    report = verify_variant(spec(8), Variant(Precision.FP32, "openvino"), path, {"x": x}, reference(x))
    assert report.passed and report.computed_in == "f32" and report.variant.name == "fp32_openvino"
    bf16 = spec(8).model_copy(update={"tolerances": {Precision.BF16: Tolerance(min_cosine=0.99)}})
    if cpu_has_native_bf16():
        got = verify_variant(bf16, Variant(Precision.BF16, "openvino"), path, {"x": x}, reference(x))
        assert got.computed_in == "bf16"
    else:
        with pytest.raises(ModelRefused, match="computes f32, not bf16"):
            verify_variant(bf16, Variant(Precision.BF16, "openvino"), path, {"x": x}, reference(x))


def test_top_k_agreement_is_the_share_of_the_references_best_k_among_the_candidates() -> None:
    ref = np.array([[5.0, 4.0, 3.0, 0.0], [0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
    cand = np.array([[4.0, 5.0, 0.0, 3.0], [0.0, 1.0, 2.0, 3.0]], dtype=np.float32)  # 2 of 3, 3 of 3
    tolerance = Tolerance(topk={"k": 3, "min": 0.9})
    metrics, failures = compare({"logits": ref}, {"logits": cand}, tolerance, [LOGITS])
    assert metrics["logits"].topk == pytest.approx((2 / 3 + 1) / 2)
    assert failures == ["output 'logits' top3 agreement 0.8333 < 0.9 allowed"]
    assert metrics["logits"].to_json()["topk"] == pytest.approx(0.8333, abs=1e-4)
    assert (
        "topk"
        not in compare({"logits": ref}, {"logits": ref}, Tolerance(top1=1.0), [LOGITS])[0]["logits"].to_json()
    )


def test_the_users_metric_judges_the_whole_outputs_with_its_bound() -> None:
    from builder.stages.verify import judge, margin

    ref = {"logits": RNG.normal(size=(4, 4)).astype(np.float32)}
    seen: list[tuple[set[str], set[str]]] = []

    def agreement(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> float:
        seen.append((set(reference), set(candidate)))
        return 0.5

    at_least = Tolerance(metric={"function": "m.metrics:agreement", "min": 0.75})
    judged = judge(ref, ref, at_least, [LOGITS], agreement)
    assert judged.model_metrics == {"m.metrics:agreement": 0.5}
    assert judged.failures == ["metric m.metrics:agreement 0.5000 < 0.75 allowed"]
    assert margin(judged, at_least) == pytest.approx((0.5 - 0.75) / 0.75)
    at_most = Tolerance(metric={"function": "m.metrics:agreement", "max": 0.6})
    assert judge(ref, ref, at_most, [LOGITS], agreement).passed
    assert seen[0] == ({"logits"}, {"logits"})


def test_a_metric_needs_one_bound_and_a_function_reference() -> None:
    with pytest.raises(ValueError, match="one bound"):
        Tolerance(metric={"function": "m:f"})
    with pytest.raises(ValueError, match="one bound"):
        Tolerance(metric={"function": "m:f", "min": 0.1, "max": 0.2})
    with pytest.raises(ValueError, match=r"package\.module:function"):
        Tolerance(metric={"function": "not a function", "min": 0.1})
    assert "topk" not in Tolerance(min_cosine=0.9).model_dump()  # keys of tolerances without them stay


def test_margin_ranks_near_misses_above_far_ones() -> None:
    from builder.stages.verify import judge, margin

    tolerance = Tolerance(min_cosine=0.97, top1=0.9)
    ref = RNG.normal(size=(8, 4)).astype(np.float32)
    near = judge({"logits": ref}, {"logits": ref + 0.05}, tolerance, [LOGITS])
    far = judge(
        {"logits": ref}, {"logits": ref + RNG.normal(size=ref.shape).astype(np.float32)}, tolerance, [LOGITS]
    )
    assert margin(near, tolerance) > margin(far, tolerance)
    assert margin(judge({"logits": ref}, {"logits": ref}, tolerance, [LOGITS]), tolerance) >= 0
