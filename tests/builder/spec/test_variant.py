"""Variants: a precision on a runtime, what the spec may ask of them, and how a target serves them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from builder.errors import SpecError, VerificationError
from builder.records import ModelBuild, VerificationReport
from builder.spec import ModelSpec, Precision, Variant, load_spec
from builder.targets import get

FP32, BF16, INT8 = Precision.FP32, Precision.BF16, Precision.INT8
OV = "openvino"


def model(**fields: object) -> dict[str, object]:
    return {
        "name": "m",
        "source": "pkg.mod:fn",
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
        "max_batch_size": 8,
        "evaluation": {"data": "eval.npz"},
        "precisions": ["fp32", "bf16"],
        "tolerances": {"fp32": {"min_cosine": 0.99}, "bf16": {"min_cosine": 0.99}},
        **fields,
    }


def loaded(tmp_path: Path, **fields: object) -> ModelSpec:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model(**fields)]}))
    return load_spec(path).models[0]


def error(tmp_path: Path, **fields: object) -> str:
    with pytest.raises(SpecError) as caught:
        loaded(tmp_path, **fields)
    return caught.value.one_line()


def test_names_are_the_precision_on_onnxruntime_and_carry_any_other_runtime() -> None:
    assert Variant(INT8).name == "int8" and Variant(BF16, OV).name == "bf16_openvino"
    for variant in (Variant(INT8), Variant(Precision.INT8_DYNAMIC), Variant(BF16, OV), Variant(FP32, OV)):
        assert Variant.parse(variant.name) == variant
    with pytest.raises(ValueError, match="names no variant"):
        Variant.parse("bf16")  # no runtime of ONNX Runtime's computes bf16


def test_each_precision_is_made_on_every_runtime_that_runs_it(tmp_path: Path) -> None:
    spec = loaded(tmp_path)
    assert spec.variants() == [Variant(FP32), Variant(FP32, OV), Variant(BF16, OV)]
    assert loaded(tmp_path, precisions=["fp32"], runtimes=["onnxruntime"]).variants() == [Variant(FP32)]


def test_a_precision_no_wanted_runtime_runs_is_refused(tmp_path: Path) -> None:
    said = error(tmp_path, runtimes=["onnxruntime"])
    assert "models.yaml" in said and "precisions" in said and "bf16 needs a runtime" in said


def test_a_pinned_runtime_must_be_wanted(tmp_path: Path) -> None:
    said = error(tmp_path, precisions=["fp32"], runtimes=["onnxruntime"], serve={"runtime": "openvino"})
    assert "serve.runtime" in said


def test_serve_may_name_several_precisions(tmp_path: Path) -> None:
    serve = loaded(tmp_path, serve={"local": ["fp32", "bf16"], "gpu": "fp32"}).serve
    assert serve.choices("local") == [FP32, BF16] and serve.variant("local") is None
    assert serve.variant("gpu") is FP32


def built(spec: ModelSpec, timings: dict[Variant, float | None], moved: float | None = None) -> ModelBuild:
    b = ModelBuild(spec)
    for variant, ms in timings.items():
        b.variants[variant] = Path("model.onnx")
        b.reports[variant] = VerificationReport(variant, ms is not None, {}, [] if ms else ["off"], ms,
                                                batch_max_diff=moved)  # fmt: skip
    return b


def test_the_fastest_allowed_variant_is_served(tmp_path: Path) -> None:
    b = built(loaded(tmp_path), {Variant(FP32): 10.0, Variant(FP32, OV): 8.0, Variant(BF16, OV): 2.0})
    spec = tmp_path / "models.yaml"
    assert get("local").choose_served(b, spec) == Variant(BF16, OV)
    # The cpu target's OpenVINO backend pads every batch to max_batch_size: served only when pinned.
    assert get("cpu").choose_served(b, spec) == Variant(FP32)
    pinned = built(
        loaded(tmp_path, serve={"runtime": "openvino"}), {v: r.ms_per_sample for v, r in b.reports.items()}
    )
    assert get("cpu").choose_served(pinned, spec) == Variant(BF16, OV)
    onnx_only = built(
        loaded(tmp_path, serve={"runtime": "onnxruntime"}), {Variant(FP32): 10.0, Variant(BF16, OV): 2.0}
    )
    assert get("local").choose_served(onnx_only, spec) == Variant(FP32)


def test_a_named_precision_that_did_not_pass_is_refused_with_its_failures(tmp_path: Path) -> None:
    b = built(loaded(tmp_path, serve={"local": "bf16"}), {Variant(FP32): 10.0, Variant(BF16, OV): None})
    with pytest.raises(VerificationError, match="off") as caught:
        get("local").choose_served(b, tmp_path / "models.yaml")
    assert caught.value.field == "serve.local"


def test_openvino_variants_get_their_runtime_on_local_and_triton_s_openvino_backend_on_cpu(
    tmp_path: Path,
) -> None:
    spec = loaded(tmp_path, serve={"threads": 2})
    local = get("local").core_config(spec, "m_bf16_openvino", Variant(BF16, OV))
    params = {k: v.string_value for k, v in local.parameters.items()}
    assert params["runtime"] == "openvino" and params["precision"] == "bf16" and "openvino_cache" in params
    cpu = get("cpu").core_config(spec, "m_bf16_openvino", Variant(BF16, OV))
    params = {k: v.string_value for k, v in cpu.parameters.items()}
    assert cpu.backend == "openvino" and cpu.default_model_filename == "model.onnx" and not cpu.platform
    assert params == {"HINT_BF16": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
                      "ENABLE_BATCH_PADDING": "YES", "INFERENCE_NUM_THREADS": "2"}  # fmt: skip
    assert not get("cpu").serves(Variant(FP32, OV)) and not get("gpu").serves(Variant(BF16, OV))


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
