"""The spec rejects inconsistent input with one line naming file, model and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.errors import SpecError
from builder.spec import ModelSpec, Precision, load_spec

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


@pytest.mark.parametrize(
    ("field", "value", "moved"),
    [
        ("serve", {"spinning": False}, "serve: spinning moved to targets.local.spinning"),
        (
            "serve",
            {"threads": 2, "local": "fp32"},
            "the precisions a target serves moved to targets.local.serve",
        ),
        ("batching", {"local_queue_policy": True}, "local_queue_policy moved to targets.local.queue_policy"),
    ],
)
def test_a_target_option_where_it_was_says_where_it_went(
    tmp_path: Path, field: str, value: dict[str, object], moved: str
) -> None:
    doc = base()
    doc["models"][0][field] = value
    assert moved in error_for(tmp_path, doc)


def test_targets_are_kept_as_written_and_left_out_of_the_dump_while_unset(tmp_path: Path) -> None:
    doc = base()
    doc["models"][0]["targets"] = {"local": {"serve": "fp32", "spinning": False}}
    model = load_spec(write(tmp_path, yaml.safe_dump(doc))).model("m")
    assert model.target_options("local") == {"serve": "fp32", "spinning": False} and not model.target_options(
        "cpu"
    )
    assert "targets" not in ModelSpec.model_validate(base()["models"][0]).model_dump()  # keys as before
