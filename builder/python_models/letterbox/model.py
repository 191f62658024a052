"""A YOLO-style detector's input from an encoded image, as Ultralytics' ``LetterBox`` makes it:
IMAGE bytes (JPEG/PNG, TYPE_STRING, [1]) -> the graph's image input (its dims, layout and dtype)
and ``image_size`` (INT64 [2], the image's height and width once upright), which ``box_decoder``
maps the boxes back with.

Each image is turned upright by its EXIF orientation, made RGB (alpha dropped, grey expanded),
resized with its aspect kept to fit ``letterbox_size`` (Pillow's ``resample`` filter), centred on
a canvas of ``pad_value`` grey, put in the configured channel order and layout, and divided by
``scale``. A request whose bytes are not an image (or are empty) gets an error response naming
the image. The helpers import without Triton.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import CHANNELS, DTYPE, IMAGE_SIZE, LAYOUT, LETTERBOX_SIZE, PAD_VALUE, RESAMPLE, SCALE
from .detection import letterboxed, upright
from .image_bytes import as_bytes

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None


@dataclass(frozen=True)
class Recipe:
    """How an image becomes the graph's input (the config's parameters)."""

    size: tuple[int, int]  # height, width
    pad: int = 114
    resample: str = "bilinear"
    scale: float = 255.0
    channels: str = "RGB"
    layout: str = "NCHW"
    dtype: str = "float32"

    @classmethod
    def from_parameters(cls, parameters: dict[str, str]) -> Recipe:
        height, width = (int(v) for v in parameters[LETTERBOX_SIZE].split(","))
        return cls(
            (height, width), int(parameters.get(PAD_VALUE, 114)), parameters.get(RESAMPLE, "bilinear"),
            float(parameters.get(SCALE, 255.0)), parameters.get(CHANNELS, "RGB"),
            parameters.get(LAYOUT, "NCHW"), parameters.get(DTYPE, "float32"),
        )  # fmt: skip

    def tensor(self, data: bytes) -> tuple[NDArray[Any], tuple[int, int]]:
        """One image's input tensor (without the batch axis) and its upright height and width."""
        picture = upright(data)
        canvas, _ = letterboxed(picture, self.size, pad=self.pad, resample=self.resample)
        return self.arranged(canvas), (picture.height, picture.width)

    def arranged(self, canvas: NDArray[np.uint8]) -> NDArray[Any]:
        """An RGB [H, W, 3] uint8 canvas in the graph's channel order, layout, scale and dtype."""
        pixels: NDArray[Any] = canvas[..., ::-1] if self.channels == "BGR" else canvas
        if self.layout == "NCHW":
            pixels = pixels.transpose(2, 0, 1)
        if self.dtype == "uint8":
            return np.ascontiguousarray(pixels)
        scaled = pixels.astype(np.float32) / np.float32(self.scale)
        return np.ascontiguousarray(scaled.astype(self.dtype))


def prepared(recipe: Recipe, images: list[bytes]) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """The images' input tensors [B, ...] and sizes [B, 2]; ValueError naming a bad image."""
    tensors, sizes = [], []
    for i, data in enumerate(images):
        try:
            tensor, size = recipe.tensor(data)
        except Exception as exc:
            raise ValueError(f"image {i}: cannot decode image: {exc}") from None
        tensors.append(tensor)
        sizes.append(size)
    return np.stack(tensors), np.array(sizes, dtype=np.int64).reshape(-1, 2)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.pixels_name = next(o["name"] for o in config["output"] if o["name"] != IMAGE_SIZE)
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.recipe = Recipe.from_parameters(parameters)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            pixels, sizes = prepared(self.recipe, [as_bytes(item) for item in images])
        except Exception as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        tensors = [pb_utils.Tensor(self.pixels_name, pixels), pb_utils.Tensor(IMAGE_SIZE, sizes)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
