"""What an image task does as images: the checkpoint's image processor before the core model.

The core model takes ``pixel_values`` (FP32, ``[C, H, W]`` at the processor's size),
``<name>_preprocess`` is ``hf_image_processor`` with the checkpoint's processor settings, and
calibration or evaluation data are a folder of images (or one image) through that processor;
without evaluation data a variant is verified on random pixels.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import ClassVar

import numpy as np

from builder.python_models.hf_image_processor.contract import PIXEL_VALUES
from builder.python_models.shared.processing_contract import IMAGE
from builder.tasks.base import (
    PYTHON_MODELS,
    Checkpoint,
    CheckpointTask,
    CoreInputs,
    Entry,
    Modality,
    Samples,
    preprocess_name,
    tensor,
)


class ImageTask(CheckpointTask):
    modality: ClassVar[Modality] = Modality.IMAGE
    data_description: ClassVar[str] = "a folder of images"

    def core_inputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor(PIXEL_VALUES, "FP32", ckpt.image_dims)]

    def preprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        return {
            "name": preprocess_name(name), "path": str(PYTHON_MODELS / "hf_image_processor"),
            "inputs": [tensor(IMAGE, "STRING", [1])],
            "outputs": [tensor(PIXEL_VALUES, "FP32", ckpt.image_dims)], "files": ckpt.files, **common,
        }  # fmt: skip

    def read_data(self, path: Path, core: CoreInputs) -> Samples:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        return pixels(core, [f.read_bytes() for f in files])


def pixels(core: CoreInputs, images: list[bytes]) -> Samples:
    """Encoded images through the checkpoint's image processor: float32 ``pixel_values``."""
    from PIL import Image
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(core.folder))
    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    values = processor(images=pictures, return_tensors="np")["pixel_values"]
    return {next(iter(core.largest)): np.asarray(values, dtype=np.float32)}
