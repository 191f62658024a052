"""image_preprocess's recipe: ImageNet's by default, another model's from the config's parameters."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from builder.python_models.image_preprocess.model import IMAGENET, MEAN, STD, Recipe, preprocess_image


def png(width: int, height: int) -> bytes:
    rng = np.random.default_rng(7)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_no_parameters_is_imagenets_recipe() -> None:
    assert Recipe.from_parameters({}) == IMAGENET
    np.testing.assert_array_equal(IMAGENET.scale, (1.0 / (255.0 * STD)).astype(np.float32))
    np.testing.assert_array_equal(IMAGENET.offset, (-MEAN / STD).astype(np.float32))


def test_parameters_on_the_pixel_scale() -> None:
    params = {"resize": "256", "crop": "224", "mean": "127,127,127", "std": "128,128,128"}
    recipe = Recipe.from_parameters({**params, "resampling": "bicubic"})
    assert recipe == Recipe(256, 224, (127 / 255,) * 3, (128 / 255,) * 3, "bicubic")
    pixels = preprocess_image(png(300, 200), recipe)
    assert pixels.shape == (3, 224, 224) and pixels.dtype == np.float32
    assert pixels.min() >= -127 / 128 - 1e-6 and pixels.max() <= 128 / 128 + 1e-6
    bilinear = preprocess_image(png(300, 200), Recipe.from_parameters(params))
    assert not np.array_equal(pixels, bilinear)  # the resampling is the recipe's


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"resampling": "nearest"}, "resampling 'nearest'"),
        ({"mean": "1,2"}, "3 values each"),
        ({"std": "0,1,1"}, "std above 0"),
        ({"crop": "300"}, "crop 300"),
    ],
)
def test_bad_parameters_are_refused(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Recipe.from_parameters(params)
