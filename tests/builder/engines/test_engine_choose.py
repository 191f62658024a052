"""Which verified plan is served: the one serve.gpu names, else the fastest measured."""

from __future__ import annotations

from pathlib import Path

from builder.engines.build import choose_plan
from builder.engines.metadata import PlanMetadata, sha256, write_metadata
from builder.engines.plan import EngineResult, Status
from builder.spec import Precision


def _result(
    tmp_path: Path, precision: Precision, ms: float | None, status: Status = Status.BUILT
) -> EngineResult:
    plan = tmp_path / precision.value / "model.plan"
    plan.parent.mkdir(parents=True)
    plan.write_bytes(precision.value.encode())
    meta = PlanMetadata(
        "tiny", precision.value, "10.13.0.35", "NVIDIA A10", "8.6", "NONE", "o", "p", sha256(plan)
    )
    meta.ms_per_sample = ms
    write_metadata(plan, meta)
    return EngineResult("tiny", precision, status, "", plan if status is not Status.FAILED else None)


def test_the_fastest_verified_plan_is_served_not_int8_by_rank(tmp_path: Path) -> None:
    # TensorRT 10's strongly typed INT8 runs every layer without Q/DQ in FP32: it can lose to FP16.
    results = [
        _result(tmp_path, Precision.FP32, 0.9),
        _result(tmp_path, Precision.FP16, 0.3),
        _result(tmp_path, Precision.INT8, 0.5),
    ]
    assert choose_plan(results, None, Precision.INT8).precision is Precision.FP16


def test_the_spec_named_variant_wins_and_failed_plans_never_serve(tmp_path: Path) -> None:
    results = [_result(tmp_path, Precision.FP16, 0.3), _result(tmp_path, Precision.INT8, 0.5)]
    assert choose_plan(results, Precision.INT8).precision is Precision.INT8
    failed = [
        _result(tmp_path / "f", Precision.FP16, 0.1, Status.FAILED),
        _result(tmp_path / "f", Precision.INT8, 0.5),
    ]
    assert choose_plan(failed, None).precision is Precision.INT8
    assert choose_plan(failed, Precision.FP16).precision is Precision.INT8  # named but not verified
    assert choose_plan([], None) is None


def test_without_measurements_the_cpu_choice_then_int8_fp16_fp32(tmp_path: Path) -> None:
    results = [_result(tmp_path, Precision.FP32, None), _result(tmp_path, Precision.FP16, None)]
    assert choose_plan(results, None, Precision.FP32).precision is Precision.FP32
    assert choose_plan(results, None).precision is Precision.FP16


def test_a_tie_goes_to_the_more_exact_precision_not_the_name(tmp_path: Path) -> None:
    # within 5 % the times are the same plan speed; keep the precision that loses least
    even = [_result(tmp_path, Precision.FP32, 0.300), _result(tmp_path, Precision.FP16, 0.300)]
    assert choose_plan(even, None).precision is Precision.FP32  # "fp16" < "fp32" chose FP16
    close = [_result(tmp_path / "c", Precision.INT8, 0.290), _result(tmp_path / "c", Precision.FP16, 0.300)]
    assert choose_plan(close, None).precision is Precision.FP16
    apart = [_result(tmp_path / "a", Precision.INT8, 0.200), _result(tmp_path / "a", Precision.FP16, 0.300)]
    assert choose_plan(apart, None).precision is Precision.INT8
