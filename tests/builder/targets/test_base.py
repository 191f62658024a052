"""What every target does alike (builder/targets/base.py): its options under ``targets.<name>``,
checked before any stage; the fastest allowed variant served; a named precision that failed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from builder.errors import SpecError, VerificationError
from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.records import SizedPoint, SizingReport
from builder.spec import Precision, Variant
from builder.targets import base, get
from builder.targets.base import TargetOptions, unknown_targets
from tests.builder.targets.builds import BF16, FP16, FP32, INT8, OV, built, loaded


def test_serve_names_one_precision_or_several(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"local": {"serve": ["fp32", "bf16"]}, "gpu": {"serve": "fp32"}})
    local, gpu = get("local").options(spec), get("gpu").options(spec)
    assert local.precisions == [FP32, BF16] and local.precision is None
    assert gpu.precision is FP32 and get("cpu").options(spec) == TargetOptions()


def test_an_option_a_target_does_not_take_is_one_line_naming_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"cpu": {"spinning": True}, "local": {"serve": "fp64"}})
    with pytest.raises(SpecError) as caught:
        get("cpu").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.cpu.spinning" and "Extra inputs" in caught.value.message
    with pytest.raises(SpecError) as caught:
        get("local").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.local.serve"


def test_a_precision_served_must_be_made(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"cpu": {"serve": "int8"}})
    with pytest.raises(SpecError, match="'int8' is not in precisions") as caught:
        get("cpu").check(spec, tmp_path / "models.yaml")
    assert caught.value.field == "targets.cpu.serve"


def test_targets_names_registered_targets(tmp_path: Path) -> None:
    spec = loaded(tmp_path, targets={"tpu": {"serve": "fp32"}})
    with pytest.raises(SpecError) as caught:
        unknown_targets(spec, ["local", "cpu", "gpu"], tmp_path / "models.yaml")
    assert caught.value.field == "targets.tpu" and "unknown target 'tpu'" in str(caught.value)


def test_a_named_precision_that_did_not_pass_is_refused_with_its_failures(tmp_path: Path) -> None:
    b = built(
        loaded(tmp_path, targets={"local": {"serve": "bf16"}}), {Variant(FP32): 10.0, Variant(BF16, OV): None}
    )
    with pytest.raises(VerificationError, match="off") as caught:
        get("local").choose_served(b, tmp_path / "models.yaml")
    assert caught.value.field == "targets.local.serve"


def test_a_pinned_runtime_serves_its_fastest_on_every_target(tmp_path: Path) -> None:
    timings = {Variant(FP32): 10.0, Variant(BF16, OV): 2.0}
    onnx_only = built(loaded(tmp_path, serve={"runtime": "onnxruntime"}), timings)
    for name in ("local", "cpu", "gpu"):
        assert get(name).choose_served(onnx_only, tmp_path / "models.yaml") == Variant(FP32), name


def test_a_variant_whose_rows_move_runs_each_row_alone_on_local_and_is_refused_on_cpu(tmp_path: Path) -> None:
    """ONNX Runtime's dynamic INT8 takes one scale for all the rows of a run: the local target's
    onnx_runner runs each of its rows alone; the container's onnxruntime backend runs a request's
    rows together whatever its batcher does, so the cpu target neither serves nor publishes it."""
    dyn = Variant(Precision.INT8_DYNAMIC)
    spec = loaded(tmp_path, precisions=["fp32", "int8_dynamic"], runtimes=["onnxruntime"],
                  tolerances={"fp32": {"min_cosine": 0.99}, "int8_dynamic": {"min_cosine": 0.9}})  # fmt: skip
    b = built(spec, {Variant(FP32): 2.0, dyn: 1.0}, moved=1e-7)
    b.reports[dyn] = replace(b.reports[dyn], batch_max_diff=0.014)
    spec_file = tmp_path / "models.yaml"
    local = get("local")
    assert local.refusals(b) == {} and local.choose_served(b, spec_file) == dyn
    b.served = dyn
    configs = {name: cfg for name, _, cfg in local.core_entries(b)}
    assert set(configs) == {"m", "m_fp32"}
    assert configs["m"].parameters["run_alone"].string_value == "1" and configs["m"].HasField(
        "dynamic_batching"
    )
    assert "run_alone" not in configs["m_fp32"].parameters
    cpu = get("cpu")
    assert cpu.refusals(b) == {
        dyn: "its answer for a row moves with the rows beside it (1.4e-02 of the row's largest value, over "
        "0.0001) and the cpu target's backend runs a request's rows together"
    }
    assert cpu.choose_served(b, spec_file) == Variant(FP32)
    b.served = Variant(FP32)
    assert cpu.published(b) == {"m": Variant(FP32)}
    ((_, _, config),) = cpu.core_entries(b)
    assert config.HasField("dynamic_batching")
    assert get("gpu").refusals(b) == {} and get("gpu").choose_served(b, spec_file) == Variant(FP32)
    alone = loaded(tmp_path, precisions=["int8_dynamic"], runtimes=["onnxruntime"],
                   tolerances={"int8_dynamic": {"min_cosine": 0.9}})  # fmt: skip
    only = built(alone, {dyn: 1.0}, moved=0.014)
    with pytest.raises(VerificationError, match="runs a request's rows together"):
        cpu.choose_served(only, spec_file)


def test_the_finalists_are_the_fastest_verified_and_those_close_to_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path, precisions=["fp32", "fp16", "int8", "bf16"])
    timings = {Variant(FP32): 2.0, Variant(FP16): 2.9, Variant(INT8): 4.0, Variant(BF16, OV): 1.0}
    assert get("local").finalists(built(spec, timings)) == [Variant(BF16, OV)]  # the others: over 1.5x
    close = {Variant(FP32): 1.2, Variant(FP16): 1.4, Variant(INT8): 1.1, Variant(BF16, OV): 1.0}
    assert len(get("local").finalists(built(spec, close))) == 3  # at most FINALISTS


def test_the_specs_pins_decide_which_sizings_may_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.os, "cpu_count", lambda: 2)
    free, allowed = get("local").sizings(loaded(tmp_path), Variant(FP32))
    assert [s.label for s in free] == ["1 x 2 threads", "2 x 1 thread"] and all(allowed)
    pinned, allowed = get("local").sizings(loaded(tmp_path, instances={"count": 2}), Variant(FP32))
    assert [(s.label, a) for s, a in zip(pinned, allowed, strict=True)] == [
        ("1 x 2 threads", False),
        ("2 x 1 thread", True),
    ]
    threads, allowed = get("local").sizings(loaded(tmp_path, serve={"threads": 1}), Variant(FP32))
    assert sorted(s.label for s, a in zip(threads, allowed, strict=True) if a) == [
        "1 x 1 thread",
        "2 x 1 thread",
    ]


def test_a_variant_is_served_at_its_chosen_sizing_else_the_specs(tmp_path: Path) -> None:
    spec = loaded(tmp_path)
    b = built(spec, {Variant(FP32): 1.0})
    assert get("local").sizing_of(b, Variant(FP32)) == Sizing(1, Knobs())
    chosen = Sizing(2, Knobs(threads=1))
    b.sizings[Variant(FP32)] = SizingReport(Variant(FP32), [SizedPoint(chosen, 2.0, 900.0)])
    b.served = Variant(FP32)
    ((_, _, config),) = get("local").core_entries(b)
    assert config.instance_group[0].count == 2 and config.parameters["intra_op_threads"].string_value == "1"
