"""zoo.efficientnet: ImageNet-trained EfficientNet-Lite0, its labels, its preprocessing and reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from builder.errors import DataError
from builder.python_models.image_preprocess.model import Recipe, preprocess_image
from builder.spec import load_spec
from zoo.efficientnet import (
    CAT_PHOTO,
    COFFEE_PHOTO,
    PREPROCESSING,
    efficientnet_lite0,
    imagenet_labels,
    read_images,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "models.yaml"
CATS = {"tabby, tabby cat", "tiger cat", "Egyptian cat"}
LITE0_PARAMS = 4_652_008


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return efficientnet_lite0()


def top1(model: torch.nn.Module, photo: Path) -> str:
    pixels = preprocess_image(photo.read_bytes(), PREPROCESSING)[None]
    with torch.no_grad():
        return imagenet_labels()[int(model(torch.from_numpy(pixels)).argmax())]


def test_labels_are_imagenets_thousand_classes_in_order() -> None:
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert labels[0] == "tench, Tinca tinca"
    assert labels[281] == "tabby, tabby cat" and labels[285] == "Egyptian cat" and labels[967] == "espresso"


def test_the_model_is_lite0_with_trained_weights(model: torch.nn.Module) -> None:
    assert sum(p.numel() for p in model.parameters()) == LITE0_PARAMS
    assert not model.training


def test_the_cat_photo_is_a_cat_and_the_coffee_an_espresso(model: torch.nn.Module) -> None:
    assert top1(model, CAT_PHOTO) in CATS
    assert top1(model, COFFEE_PHOTO) == "espresso"


def test_the_served_preprocessing_is_the_readers(model: torch.nn.Module) -> None:
    """The spec's Python model gets the recipe the calibration and eval reader uses."""
    spec = load_spec(SPEC)
    ensemble = next(e for e in spec.ensembles if e.name == "efficientnet_lite0_image")
    (step,) = [s for s in ensemble.steps if s.model != "efficientnet_lite0"]
    (pm,) = [p for p in spec.python_models if p.name == step.model]
    assert Recipe.from_parameters({k: str(v) for k, v in pm.parameters.items()}) == PREPROCESSING
    assert PREPROCESSING.resampling == "bicubic" and PREPROCESSING.crop == 224
    np.testing.assert_allclose(PREPROCESSING.offset, -127 / 128, rtol=1e-6)  # (x - 127) / 128


def test_reader_reads_every_photo_and_refuses_an_empty_folder(tmp_path: Path) -> None:
    pixels = read_images(CAT_PHOTO.parent)["input"]
    assert pixels.shape == (32, 3, 224, 224) and pixels.dtype == np.float32
    assert pixels.min() >= -1.0 and pixels.max() <= 1.0
    with pytest.raises(DataError, match=r"no \.jpg"):
        read_images(tmp_path)
