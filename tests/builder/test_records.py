"""The build's records (builder/records.py): how sized points are compared and what a sizing report
chooses and says."""

from __future__ import annotations

from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.records import ModelBuild, SizedPoint, SizingReport, VerificationReport, best_of
from builder.spec import ModelSpec, Precision, Variant

ONE, TWO = Sizing(1, Knobs(threads=2)), Sizing(2, Knobs(threads=1))


def test_the_best_point_balances_latency_and_throughput() -> None:
    fast_alone = SizedPoint(ONE, c1_ms=2.0, c8_rows_per_s=300.0)
    wide = SizedPoint(TWO, c1_ms=4.0, c8_rows_per_s=330.0)
    assert best_of([fast_alone, wide]) is fast_alone  # 10 % more throughput does not buy 2x latency
    busy = SizedPoint(TWO, c1_ms=2.2, c8_rows_per_s=600.0)
    assert best_of([fast_alone, busy]) is busy


def test_a_report_chooses_among_what_the_spec_allows_and_says_what_it_left_out() -> None:
    variant = Variant(Precision.INT8, "openvino")
    pinned = SizedPoint(TWO, c1_ms=4.2, c8_rows_per_s=349.0)
    free = SizedPoint(ONE, c1_ms=3.0, c8_rows_per_s=362.0, allowed=False)
    report = SizingReport(variant, [free, pinned])
    assert report.chosen is pinned
    note = report.pinned_note()
    assert "int8_openvino served at 2 x 1 thread as the spec pins it" in note and "1 x 2 threads" in note
    assert SizingReport(variant, [SizedPoint(ONE, 3.0, 362.0), pinned]).pinned_note() == ""
    again = SizingReport.from_json(variant, dict(report.to_json()))
    assert again == report and report.to_json()["chosen"] == "2 x 1 thread"


def _build() -> ModelBuild:
    spec = ModelSpec.model_validate({
        "name": "m", "source": "m.onnx", "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [4]}], "precisions": ["fp32", "int8"],
        "tolerances": {"fp32": {"max_abs": 1.0}, "int8": {"max_abs": 1.0}}, "calibration": {"data": "c.npz"},
    })  # fmt: skip
    b = ModelBuild(spec)
    for variant, ms in ((Variant(Precision.FP32), 1.0), (Variant(Precision.INT8), 2.0)):
        b.reports[variant] = VerificationReport(variant, True, {}, [], ms)
    return b


def test_the_race_compares_sized_finalists_at_their_chosen_sizing() -> None:
    b = _build()
    fp32, int8 = Variant(Precision.FP32), Variant(Precision.INT8)
    assert b.fastest([fp32, int8]) == fp32  # nothing sized: the verification's timing
    b.sizings[fp32] = SizingReport(fp32, [SizedPoint(ONE, 3.0, 300.0)])
    b.sizings[int8] = SizingReport(int8, [SizedPoint(ONE, 2.0, 500.0)])
    assert b.fastest([fp32, int8]) == int8
