from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.data import load_samples
from builder.errors import DataError
from builder.spec import DataSpec, ModelSpec


def make_model(**overrides: Any) -> ModelSpec:
    raw: dict[str, Any] = {
        "name": "m",
        "source": "zoo.m:build",
        "inputs": [
            {"name": "x", "dtype": "FP32", "dims": [3, -1]},
            {"name": "mask", "dtype": "INT64", "dims": [4], "optional": True},
        ],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
        "max_batch_size": 8,
        "profiles": [{"shapes": {"x": {"min": [3, 2], "opt": [3, 4], "max": [3, 8]}}}],
        "evaluation": {"data": "eval.npz"},
        "tolerances": {"fp32": {"min_cosine": 0.99}},
    }
    raw.update(overrides)
    return ModelSpec.model_validate(raw)


def load(tmp_path: Path, data: DataSpec, model: ModelSpec | None = None) -> dict[str, np.ndarray]:
    return load_samples(
        data,
        model or make_model(),
        spec_dir=tmp_path,
        spec_file=tmp_path / "models.yaml",
        section="evaluation",
    )


def write_npz(tmp_path: Path, **arrays: np.ndarray) -> DataSpec:
    np.savez(tmp_path / "eval.npz", **arrays)
    return DataSpec(data="eval.npz")


def x(n: int = 5, length: int = 4, dtype: Any = np.float32) -> np.ndarray:
    return np.arange(n * 3 * length).reshape(n, 3, length).astype(dtype)


def test_npz_loads_and_keeps_values(tmp_path: Path) -> None:
    mask = np.ones((5, 4), np.int64)
    out = load(tmp_path, write_npz(tmp_path, x=x(), mask=mask))
    assert set(out) == {"x", "mask"}
    assert out["x"].dtype == np.float32 and out["x"].shape == (5, 3, 4)
    np.testing.assert_array_equal(out["x"], x())
    np.testing.assert_array_equal(out["mask"], mask)


def test_optional_input_may_be_absent(tmp_path: Path) -> None:
    assert set(load(tmp_path, write_npz(tmp_path, x=x()))) == {"x"}


def test_max_samples_applies(tmp_path: Path) -> None:
    np.savez(tmp_path / "eval.npz", x=x(n=10))
    out = load(tmp_path, DataSpec(data="eval.npz", max_samples=3))
    np.testing.assert_array_equal(out["x"], x(n=10)[:3])


def error(tmp_path: Path, data: DataSpec, model: ModelSpec | None = None) -> DataError:
    with pytest.raises(DataError) as info:
        load(tmp_path, data, model)
    assert info.value.model == "m"
    return info.value


def test_missing_path_names_file_and_field(tmp_path: Path) -> None:
    err = error(tmp_path, DataSpec(data="nope.npz"))
    assert err.file == str(tmp_path / "nope.npz")
    assert err.field == "evaluation.data"
    assert "not found" in err.message


@pytest.mark.parametrize(
    ("arrays", "field", "words"),
    [
        ({"mask": np.ones((5, 4), np.int64)}, "evaluation.data", "no array for inputs ['x']"),
        ({"x": x(), "z": x()}, "evaluation.data", "['z'] are not inputs"),
        ({"x": x(dtype=np.float64)}, "evaluation.data: input 'x'", "dtype float64"),
        ({"x": x()[:, 0]}, "evaluation.data: input 'x'", "rank 2"),
        ({"x": np.zeros((5, 2, 4), np.float32)}, "evaluation.data: input 'x'", "axis 1 is 2"),
        ({"x": x(length=9)}, "evaluation.data: input 'x'", "outside the profile's 2..8"),
        ({"x": x(length=1)}, "evaluation.data: input 'x'", "outside the profile's 2..8"),
        ({"x": x(n=5), "mask": np.ones((4, 4), np.int64)}, "evaluation.data", "different sample counts"),
        ({"x": x(n=0)}, "evaluation.data", "no samples"),
    ],
)
def test_bad_arrays_are_data_errors(
    tmp_path: Path, arrays: dict[str, np.ndarray], field: str, words: str
) -> None:
    err = error(tmp_path, write_npz(tmp_path, **arrays))
    assert err.field == field
    assert words in err.message
    assert err.file == str(tmp_path / "eval.npz")
    assert str(err).startswith(f"{tmp_path / 'eval.npz'}: model 'm': {field}: ")


def test_npy_is_not_an_npz(tmp_path: Path) -> None:
    np.save(tmp_path / "eval.npy", x())
    assert "not an .npz" in error(tmp_path, DataSpec(data="eval.npy")).message


def test_calibration_section_in_field(tmp_path: Path) -> None:
    write_npz(tmp_path, x=x(dtype=np.int32))
    with pytest.raises(DataError) as info:
        load_samples(
            DataSpec(data="eval.npz"),
            make_model(),
            spec_dir=tmp_path,
            spec_file=tmp_path / "models.yaml",
            section="calibration",
        )
    assert info.value.field == "calibration.data: input 'x'"


READER = """
import numpy as np

def read(path):
    n = len(path.read_text().split())
    return {"x": np.ones((n, 3, 2), np.float32)}

def no_path(path):
    assert path is None
    return {"x": np.ones((2, 3, 2), np.float32)}

def not_a_dict(path):
    return [1, 2]

def broken(path):
    raise ValueError("bad image")
"""


@pytest.fixture
def reader_module(tmp_path: Path) -> str:
    name = f"readers_{tmp_path.name.replace('-', '_')}"  # unique per test: importlib caches modules
    (tmp_path / f"{name}.py").write_text(READER)
    return name


def test_reader_gets_the_path(tmp_path: Path, reader_module: str) -> None:
    (tmp_path / "list.txt").write_text("a b c")
    out = load(tmp_path, DataSpec(data="list.txt", reader=f"{reader_module}:read"))
    assert out["x"].shape == (3, 3, 2)


def test_reader_without_data_gets_none(tmp_path: Path, reader_module: str) -> None:
    assert load(tmp_path, DataSpec(reader=f"{reader_module}:no_path"))["x"].shape == (2, 3, 2)


@pytest.mark.parametrize(("fn", "words"), [("not_a_dict", "not a dict"), ("broken", "bad image")])
def test_reader_failures_are_data_errors(tmp_path: Path, reader_module: str, fn: str, words: str) -> None:
    err = error(tmp_path, DataSpec(reader=f"{reader_module}:{fn}"))
    assert words in err.message
    assert err.field == "evaluation.reader"
    assert err.file == str(tmp_path / "models.yaml")


def test_reader_output_is_checked_too(tmp_path: Path, reader_module: str) -> None:
    model = make_model(profiles=[{"shapes": {"x": {"min": [3, 4], "opt": [3, 4], "max": [3, 8]}}}])
    err = error(tmp_path, DataSpec(reader=f"{reader_module}:no_path"), model)
    assert "outside the profile's 4..8" in err.message
    assert err.file == str(tmp_path / "models.yaml")


def test_no_batch_model_still_has_a_sample_axis(tmp_path: Path) -> None:
    model = make_model(
        max_batch_size=0,
        inputs=[{"name": "x", "dtype": "FP32", "dims": [3, 4]}],
        profiles=[],
    )
    assert load(tmp_path, write_npz(tmp_path, x=x()), model)["x"].shape == (5, 3, 4)


def test_synthetic_token_inputs_are_ids_in_the_vocabulary_masks_of_ones_and_type_ids_zeros(
    tmp_path: Path,
) -> None:
    """All-zero masks mask every token (a correct fp16 MiniLM was dropped at cosine 0.52 on them)."""
    from builder.data import synthetic_samples
    from builder.spec import load_spec
    from tests.builder.fixtures import guessed_shapes
    from tests.builder.fixtures.foreign_onnx import save

    graph = save(guessed_shapes.token_encoder(vocab=50), tmp_path / "enc.onnx")
    (tmp_path / "models.yaml").write_text("models:\n  - {name: enc, source: enc.onnx}\n")
    model = load_spec(tmp_path / "models.yaml").models[0]
    samples = synthetic_samples(model, spec_dir=tmp_path, graph=graph)
    ids = samples["input_ids"]
    assert ids.shape == (8, 64) and ids.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 10
    assert (samples["attention_mask"] == 1).all()
    assert (samples["token_type_ids"] == 0).all()
    # Without the graph, the ids' range is read from the source file itself.
    assert np.array_equal(synthetic_samples(model, spec_dir=tmp_path)["input_ids"], ids)
