"""A checkpoint's own image processor as a Triton Python model: IMAGE bytes (JPEG/PNG, TYPE_STRING,
[1]) -> ``pixel_values`` (FP32, [C, H, W]), and where the config declares them ``pixel_mask``
(INT64 [H, W]) and ``image_size`` (INT64 [2], each image's height and width).

``AutoImageProcessor`` loads ``preprocessor_config.json`` copied beside this file, so the server
resizes, crops, normalises and pads as transformers' pipeline does for the checkpoint (a processor
that keeps each image's aspect ratio pads a request's images to its largest; a request of one
image is not padded). A request whose bytes are not an image gets an error response. The helpers
import without Triton.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import IMAGE_SIZE, PIXEL_MASK, PIXEL_VALUES
from .image_bytes import as_bytes

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None


def load_processor(folder: str | Path) -> Any:
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(folder))


def pixel_values(processor: Any, images: list[bytes]) -> NDArray[Any]:
    """float32 [len(images), C, H, W], each image turned upright by its EXIF orientation first, as
    transformers' ``load_image`` does (a phone's photo is stored sideways with a rotation tag)."""
    return processed(processor, images)[PIXEL_VALUES]


def processed(processor: Any, images: list[bytes]) -> dict[str, NDArray[Any]]:
    """``pixel_values`` (float32), ``pixel_mask`` (int64, ones where the processor makes none) and
    ``image_size`` (int64 [len(images), 2]) of the images, each turned upright first."""
    from PIL import Image, ImageOps

    pictures = []
    for data in images:
        if not data:
            raise ValueError("the image is empty (0 bytes)")
        pictures.append(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    made = processor(images=pictures, return_tensors="np")
    values = np.asarray(made[PIXEL_VALUES], dtype=np.float32)
    mask = made.get(PIXEL_MASK)
    if mask is None:
        mask = np.ones((values.shape[0], *values.shape[2:]), dtype=np.int64)
    sizes = np.array([[p.height, p.width] for p in pictures], dtype=np.int64).reshape(-1, 2)
    return {PIXEL_VALUES: values, PIXEL_MASK: np.asarray(mask, dtype=np.int64), IMAGE_SIZE: sizes}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_names = [o["name"] for o in config["output"]]
        self.processor = load_processor(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            made = processed(self.processor, [as_bytes(item) for item in images])
        except Exception as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cannot decode image: {exc}"))
        tensors = [pb_utils.Tensor(name, made[name]) for name in self.output_names]
        return pb_utils.InferenceResponse(output_tensors=tensors)
