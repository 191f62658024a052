"""A checkpoint's own image processor as a Triton Python model: IMAGE bytes (JPEG/PNG, TYPE_STRING,
[1]) -> ``pixel_values`` (FP32, [C, H, W]).

``AutoImageProcessor`` loads ``preprocessor_config.json`` copied beside this file, so the server
resizes, crops and normalises as transformers' pipeline does for the checkpoint. A request whose
bytes are not an image gets an error response. The helpers import without Triton.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

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
    from PIL import Image, ImageOps

    pictures = [ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB") for data in images]
    return np.asarray(processor(images=pictures, return_tensors="np")["pixel_values"], dtype=np.float32)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.processor = load_processor(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            pixels = pixel_values(self.processor, [as_bytes(item) for item in images])
        except Exception as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cannot decode image: {exc}"))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, pixels)])
