"""Image bytes (JPEG/PNG) -> the normalised ImageNet tensor, as a Triton Python model.

``preprocess_image`` is also what calibration and evaluation readers import,
so served and offline preprocessing are the same code.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
from numpy.typing import NDArray
from PIL import Image

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (calibration readers, tests)
    pb_utils = None

RESIZE = 256
CROP = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
# (x / 255 - mean) / std as one multiply-add per pixel.
_SCALE = (1.0 / (255.0 * STD)).astype(np.float32)
_OFFSET = (-MEAN / STD).astype(np.float32)


def preprocess_image(data: bytes) -> NDArray[Any]:
    """Decode, RGB, shorter side to 256 (bilinear), centre crop 224, normalise; float32 [3, 224, 224]."""
    with Image.open(io.BytesIO(data)) as img:
        img.draft("RGB", (RESIZE, RESIZE))  # JPEG: decode at a reduced scale still >= 256 a side
        img = img.convert("RGB")
        w, h = img.size
        scale = RESIZE / min(w, h)
        size = (max(RESIZE, round(w * scale)), max(RESIZE, round(h * scale)))
        left, top = (size[0] - CROP) // 2, (size[1] - CROP) // 2
        img = img.resize(size, Image.BILINEAR).crop((left, top, left + CROP, top + CROP))
        hwc = np.asarray(img, dtype=np.float32)
    return np.ascontiguousarray((hwc * _SCALE + _OFFSET).transpose(2, 0, 1))


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, np.ndarray):  # a [1] element of a [B, 1] request
        return _as_bytes(item.reshape(-1)[0])
    if isinstance(item, str):
        return item.encode("latin-1")
    raise TypeError(f"expected image bytes, got {type(item).__name__}")


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
        try:
            pixels = np.stack([preprocess_image(_as_bytes(item)) for item in images])
        except Exception as exc:
            msg = f"cannot decode image: {exc}"
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(msg))
        if not self.batched:  # dims [1] without a batch axis: one image, no leading axis
            pixels = pixels[0]
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, pixels)])
