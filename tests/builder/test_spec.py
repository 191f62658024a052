"""The spec rejects inconsistent input with one line naming file, model and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.errors import SpecError
from builder.spec import ModelSpec, Precision, load_spec
from builder.targets.base import unknown_serve_targets
from builder.targets.gpu import GpuTarget

ROOT = Path(__file__).parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return path


def base() -> dict:
    return {
        "models": [
            {
                "name": "m",
                "source": "pkg.mod:fn",
                "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
                "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
                "max_batch_size": 8,
                "evaluation": {"data": "eval.npz"},
                "tolerances": {"fp32": {"min_cosine": 0.99}},
            }
        ]
    }


def error_for(tmp_path: Path, doc: dict) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, yaml.safe_dump(doc)))
    return info.value.one_line()


def test_default_zoo_loads() -> None:
    spec = load_spec(ROOT / "models.yaml")
    names = {m.name for m in spec.all_models()}
    assert {"simple", "resnet18", "image_preprocess", "resnet18_image"} <= names


def test_valid_base_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, yaml.safe_dump(base())))
    assert spec.model("m").precisions == [Precision.FP32]


def test_bad_yaml_names_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "models:\n  - name: [unclosed\n"))
    assert "models.yaml" in str(info.value) and "line" in str(info.value)


def test_unknown_field(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["max_batch"] = 4
    assert error_for(tmp_path, doc).endswith("model 'm': max_batch: unknown field")


def test_bad_name(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["name"] = "my model"
    assert "model 'my model': name:" in error_for(tmp_path, doc)


def test_preferred_batch_above_max(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["batching"] = {"preferred_batch_sizes": [16]}
    line = error_for(tmp_path, doc)
    assert "model 'm'" in line and "preferred_batch_sizes: 16 is above max_batch_size 8" in line


def test_dynamic_dim_needs_profile(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["inputs"][0]["dims"] = [-1]
    assert "need an optimization profile" in error_for(tmp_path, doc)


def test_profile_opt_batch_above_max_batch(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["profiles"] = [{"opt_batch": 9}]
    assert "the profile's max batch is max_batch_size" in error_for(tmp_path, doc)


def test_profile_static_axis_must_match(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["profiles"] = [{"shapes": {"x": {"min": [1], "opt": [4], "max": [4]}}}]
    assert "axis 0 is static (4)" in error_for(tmp_path, doc)


def test_int8_needs_calibration_and_tolerance(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["precisions"] = ["fp32", "int8"]
    assert "calibration" in error_for(tmp_path, doc)
    doc["models"][0]["calibration"] = {"data": "calib.npz"}
    assert "no tolerance for precision 'int8'" in error_for(tmp_path, doc)


def test_tolerance_must_check_something(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["tolerances"] = {"fp32": {}}
    assert "tolerances.fp32" in error_for(tmp_path, doc)


def test_duplicate_model_names(tmp_path: Path) -> None:
    doc = base()
    doc["models"].append(dict(doc["models"][0]))
    assert "'m' appears twice" in error_for(tmp_path, doc)


def test_ensemble_unknown_step(tmp_path: Path) -> None:
    doc = base()
    doc["ensembles"] = [
        {
            "name": "e",
            "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
            "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
            "steps": [{"model": "nope", "inputs": {"x": "x"}, "outputs": {"y": "y"}}],
        }
    ]
    assert "unknown model 'nope'" in error_for(tmp_path, doc)


def test_gpu_cannot_serve_dynamic_int8(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["precisions"] = ["fp32", "int8_dynamic"]
    doc["models"][0]["tolerances"]["int8_dynamic"] = {"min_cosine": 0.9}
    doc["models"][0]["serve"] = {"gpu": "int8_dynamic"}
    model = ModelSpec.model_validate(doc["models"][0])  # a valid spec: the gpu target refuses it
    with pytest.raises(SpecError) as info:
        GpuTarget().check(model, tmp_path / "models.yaml")
    assert info.value.field == "serve.gpu" and "int8_dynamic has no TensorRT kernels" in str(info.value)


def test_serve_names_a_registered_target(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["serve"] = {"tpu": "fp32"}
    model = ModelSpec.model_validate(doc["models"][0])
    with pytest.raises(SpecError) as info:
        unknown_serve_targets(model, ["local", "cpu", "gpu"], tmp_path / "models.yaml")
    assert info.value.field == "serve.tpu" and "unknown target 'tpu'" in str(info.value)


def test_shape_range_and_opt_batch_come_from_the_profile(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["inputs"][0]["dims"] = [-1]
    doc["models"][0]["profiles"] = [
        {"opt_batch": 4, "shapes": {"x": {"min": [1], "opt": [64], "max": [128]}}}
    ]
    model = load_spec(write(tmp_path, yaml.safe_dump(doc))).model("m")
    assert model.opt_batch() == 4
    assert model.shape_range(model.inputs[0]).max == [128]


@pytest.mark.parametrize(
    ("fmt", "dims"),
    [("NCHW", [224, 224, 3]), ("NHWC", [3, 224, 224]), ("NCHW", [3, 224]), ("NHWC", [2, 2, 4])],
)
def test_image_format_must_match_the_channels(tmp_path: Path, fmt: str, dims: list[int]) -> None:
    doc = base()
    doc["models"][0]["inputs"] = [{"name": "x", "dtype": "FP32", "dims": dims, "format": fmt}]
    message = error_for(tmp_path, doc)
    assert "models.yaml" in message and "model 'm'" in message and "inputs" in message
    assert f"format {fmt} needs dims of 3 with 1 or 3 channels" in message, message


@pytest.mark.parametrize(
    ("fmt", "dims"), [("NCHW", [3, 224, 224]), ("NCHW", [1, 28, 28]), ("NHWC", [64, 64, 3])]
)
def test_image_format_loads(tmp_path: Path, fmt: str, dims: list[int]) -> None:
    doc = base()
    doc["models"][0]["inputs"] = [{"name": "x", "dtype": "FP32", "dims": dims, "format": fmt}]
    assert load_spec(write(tmp_path, yaml.safe_dump(doc))).model("m").inputs[0].format.value == fmt


def test_image_format_is_for_inputs_only(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["outputs"][0].update(dims=[3, 4, 4], format="NCHW")
    assert "outputs[0] 'y': format is for image inputs only" in error_for(tmp_path, doc)


def test_image_format_names_the_choices(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["inputs"][0].update(dims=[3, 4, 4], format="CHW")
    message = error_for(tmp_path, doc)
    assert "format" in message and "NCHW" in message and "NHWC" in message, message


def test_serve_spinning_is_a_field_not_a_target(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["serve"] = {"spinning": False, "local": "fp32"}
    serve = load_spec(write(tmp_path, yaml.safe_dump(doc))).model("m").serve
    assert serve.spinning is False
    assert serve.variants() == {"local": Precision.FP32}
    unset = ModelSpec.model_validate(base()["models"][0]).serve
    assert unset.spinning is None and "spinning" not in unset.model_dump()  # dumps (keys) as before


def test_serve_spinning_must_be_a_boolean(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["serve"] = {"spinning": "sometimes"}
    assert error_for(tmp_path, doc) == (
        f"{tmp_path / 'models.yaml'}: model 'm': serve.spinning: "
        "Input should be a valid boolean, unable to interpret input (got 'sometimes')"
    )
