"""Image bytes (JPEG/PNG) -> the normalised tensor a classifier was trained on, as a Triton Python model.

``preprocess_image`` is also what calibration and evaluation readers import,
so served and offline preprocessing are the same code. The recipe (resize, crop, mean, std,
resampling) comes from the model config's parameters; unset ones keep torchvision's ImageNet
recipe (shorter side 256, bilinear, centre 224, ImageNet mean and std).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from . import contract
from .image_bytes import as_bytes

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (calibration readers, tests)
    pb_utils = None

RESIZE = 256
CROP = 224
RESAMPLING = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


@dataclass(frozen=True)
class Recipe:
    """Decode, RGB, shorter side to ``resize``, centre crop ``crop``, then (x / 255 - mean) / std."""

    resize: int = RESIZE
    crop: int = CROP
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)  # per channel, on the 0..1 scale
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    resampling: str = "bilinear"
    # (x / 255 - mean) / std as one multiply-add per pixel.
    scale: NDArray[Any] = field(init=False, repr=False, compare=False)
    offset: NDArray[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.resampling not in RESAMPLING:
            raise ValueError(f"resampling '{self.resampling}' is not one of {', '.join(RESAMPLING)}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("mean and std need 3 values each, std above 0")
        if not 0 < self.crop <= self.resize:
            raise ValueError(f"crop {self.crop} must be between 1 and resize {self.resize}")
        mean, std = np.array(self.mean, dtype=np.float32), np.array(self.std, dtype=np.float32)
        object.__setattr__(self, "scale", (1.0 / (255.0 * std)).astype(np.float32))
        object.__setattr__(self, "offset", (-mean / std).astype(np.float32))

    @classmethod
    def from_parameters(cls, parameters: dict[str, str]) -> Recipe:
        """From the config's string parameters ``resize``, ``crop``, ``mean`` and ``std``
        ("r,g,b" on the 0..255 pixel scale) and ``resampling``; unset ones keep the defaults."""
        given: dict[str, Any] = {}
        for key, name in ((contract.RESIZE, "resize"), (contract.CROP, "crop")):
            if key in parameters:
                given[name] = int(parameters[key])
        for key, name in ((contract.MEAN, "mean"), (contract.STD, "std")):
            if key in parameters:
                given[name] = tuple(float(v) / 255.0 for v in parameters[key].split(","))
        if contract.RESAMPLING in parameters:
            given["resampling"] = parameters[contract.RESAMPLING]
        return cls(**given)


IMAGENET = Recipe()
MEAN = np.array(IMAGENET.mean, dtype=np.float32)
STD = np.array(IMAGENET.std, dtype=np.float32)


def preprocess_image(data: bytes, recipe: Recipe = IMAGENET) -> NDArray[Any]:
    """Decode, RGB, shorter side to ``recipe.resize``, centre crop ``recipe.crop``, normalise;
    float32 [3, crop, crop]."""
    size, crop = recipe.resize, recipe.crop
    with Image.open(io.BytesIO(data)) as img:
        img.draft("RGB", (size, size))  # JPEG: decode at a reduced scale still >= the resize a side
        img = img.convert("RGB")
        w, h = img.size
        scale = size / min(w, h)
        resized = (max(size, round(w * scale)), max(size, round(h * scale)))
        left, top = (resized[0] - crop) // 2, (resized[1] - crop) // 2
        img = img.resize(resized, RESAMPLING[recipe.resampling]).crop((left, top, left + crop, top + crop))
        hwc = np.asarray(img, dtype=np.float32)
    return np.ascontiguousarray((hwc * recipe.scale + recipe.offset).transpose(2, 0, 1))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.recipe = Recipe.from_parameters(parameters)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            pixels = np.stack([preprocess_image(as_bytes(item), self.recipe) for item in images])
        except Exception as exc:
            msg = f"cannot decode image: {exc}"
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(msg))
        if not self.batched:  # dims [1] without a batch axis: one image, no leading axis
            pixels = pixels[0]
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, pixels)])
