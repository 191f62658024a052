"""An image task's data: a folder of images (or one image) through the checkpoint's image
processor, in file-name order; random pixels where there are none."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.tasks import task
from builder.tasks.base import CoreInputs
from tests.builder.fixtures import hf_checkpoints as hf


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> CoreInputs:
    folder = hf.vit(tmp_path_factory.mktemp("image") / "vit")
    return CoreInputs(folder, {"pixel_values": [3, 32, 32]})


def test_a_folder_of_images_is_read_in_name_order(core: CoreInputs, tmp_path: Path) -> None:
    images = task("image-classification")
    for seed, size in ((2, (40, 48)), (1, (64, 20))):
        (tmp_path / f"{seed}.png").write_bytes(hf.image_bytes(seed, size))
    arrays = images.read_data(tmp_path, core)
    assert list(arrays) == ["pixel_values"] and arrays["pixel_values"].shape == (2, 3, 32, 32)
    first = images.read_data(tmp_path / "1.png", core)["pixel_values"]
    assert (first[0] == arrays["pixel_values"][0]).all()


def test_a_file_that_is_no_image_is_an_os_error_and_there_are_no_sample_images(
    core: CoreInputs, tmp_path: Path
) -> None:
    images = task("image-classification")
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(OSError):
        images.read_data(tmp_path, core)
    assert images.sample_inputs(core, 4) is None and images.data_description == "a folder of images"
