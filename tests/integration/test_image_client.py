"""A client written the way Triton's image-classification example (image_client.py) is: it reads
the image input's layout and dtype from the model config, over gRPC and over HTTP, scales a real
photo to that layout and asks for the top classes (`class_count`). It classifies the photo as the
server's own image ensemble does (same preprocessing, done on the server from the JPEG bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import triton_to_np_dtype

from builder.server import TritonServer

pytestmark = pytest.mark.integration

PHOTO = Path(__file__).parents[2] / "calibration" / "resnet18" / "eval" / "eval_002_astronaut.jpg"
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)  # the ImageNet scaling resnet18 expects
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
TOP = 3


@dataclass(frozen=True)
class ImageInput:
    input_name: str
    output_name: str
    layout: str  # "NCHW" or "NHWC", from the config
    dtype: str  # Triton's name, e.g. "FP32"
    c: int
    h: int
    w: int


def parse_model(metadata: dict[str, Any], config: dict[str, Any]) -> ImageInput:
    """As image_client.py's parse_model: one image input of rank 3 (plus batch), one output, and a
    layout in the config, else refuse."""
    if len(metadata["inputs"]) != 1 or len(metadata["outputs"]) != 1:
        raise ValueError("expecting 1 input and 1 output")
    layout = config["input"][0].get("format", "FORMAT_NONE")
    if layout not in ("FORMAT_NCHW", "FORMAT_NHWC"):
        raise ValueError(f"unexpected input format {layout}, expecting FORMAT_NCHW or FORMAT_NHWC")
    dims = [int(d) for d in metadata["inputs"][0]["shape"]]
    if int(config.get("max_batch_size", 0)) > 0:
        dims = dims[1:]
    if len(dims) != 3:
        raise ValueError(f"expecting an input of rank 3, got {dims}")
    if layout == "FORMAT_NHWC":
        h, w, c = dims
    else:
        c, h, w = dims
    return ImageInput(
        metadata["inputs"][0]["name"],
        metadata["outputs"][0]["name"],
        layout.removeprefix("FORMAT_"),
        metadata["inputs"][0]["datatype"],
        c,
        h,
        w,
    )


def preprocess(img: Image.Image, model: ImageInput) -> np.ndarray:
    """Shorter side to 256/224 of the input size, centre crop, the model's dtype, ImageNet scaling,
    then the layout the config states."""
    img = img.convert("L" if model.c == 1 else "RGB")
    scale = (model.h * 256 / 224) / min(img.size)
    size = (max(model.w, round(img.size[0] * scale)), max(model.h, round(img.size[1] * scale)))
    left, top = (size[0] - model.w) // 2, (size[1] - model.h) // 2
    crop = img.resize(size, Image.BILINEAR).crop((left, top, left + model.w, top + model.h))
    hwc = np.asarray(crop).astype(triton_to_np_dtype(model.dtype))
    scaled = (hwc / 255.0 - MEAN) / STD
    typed = scaled.astype(triton_to_np_dtype(model.dtype))
    return typed.transpose(2, 0, 1) if model.layout == "NCHW" else typed


def top_classes(raw: np.ndarray) -> list[tuple[float, int, str]]:
    """class_count answers are "score:index:label" strings."""
    out = []
    for entry in raw.reshape(-1):
        score, index, label = entry.decode().split(":")
        out.append((float(score), int(index), label))
    return out


def classify(protocol: str, url: str, model_name: str, photo: Path) -> tuple[ImageInput, list[Any]]:
    lib: Any = grpcclient if protocol == "grpc" else httpclient
    client = lib.InferenceServerClient(url.split("://", 1)[-1])
    try:
        if protocol == "grpc":
            metadata = client.get_model_metadata(model_name, as_json=True)
            config = client.get_model_config(model_name, as_json=True)["config"]
        else:
            metadata, config = client.get_model_metadata(model_name), client.get_model_config(model_name)
        model = parse_model(metadata, config)
        with Image.open(photo) as img:
            batch = preprocess(img, model)[None]
        tensor = lib.InferInput(model.input_name, list(batch.shape), model.dtype)
        tensor.set_data_from_numpy(batch)
        wanted = lib.InferRequestedOutput(model.output_name, class_count=TOP)
        result = client.infer(model_name, [tensor], outputs=[wanted])
        return model, top_classes(result.as_numpy(model.output_name))
    finally:
        client.close()


def server_side_top(url: str, photo: Path) -> list[tuple[float, int, str]]:
    """The same photo through the image ensemble: JPEG bytes in, preprocessing on the server."""
    client = grpcclient.InferenceServerClient(url.split("://", 1)[-1])
    try:
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[photo.read_bytes()]], dtype=np.object_))
        wanted = grpcclient.InferRequestedOutput("LOGITS", class_count=TOP)
        return top_classes(client.infer("resnet18_image", [tensor], outputs=[wanted]).as_numpy("LOGITS"))
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_image_client_classifies_a_photo(triton: TritonServer, protocol: str) -> None:
    url = triton.grpc_url if protocol == "grpc" else triton.http_url
    model, top = classify(protocol, url, "resnet18", PHOTO)
    assert (model.layout, model.dtype, model.c, model.h, model.w) == ("NCHW", "FP32", 3, 224, 224)
    reference = server_side_top(triton.grpc_url, PHOTO)
    assert [index for _, index, _ in top] == [index for _, index, _ in reference]
    assert [label for _, _, label in top] == [label for _, _, label in reference]
    np.testing.assert_allclose([s for s, _, _ in top], [s for s, _, _ in reference], rtol=0.05, atol=0.05)


def test_image_client_refuses_a_model_without_a_layout(triton: TritonServer) -> None:
    """What Triton's example says for an input with no format (resnet18 had none before)."""
    client = grpcclient.InferenceServerClient(triton.grpc_url.split("://", 1)[-1])
    try:
        metadata = client.get_model_metadata("resnet18", as_json=True)
        config = client.get_model_config("resnet18", as_json=True)["config"]
    finally:
        client.close()
    config["input"][0].pop("format")
    with pytest.raises(ValueError, match="unexpected input format FORMAT_NONE"):
        parse_model(metadata, config)


def test_the_layout_matters(triton: TritonServer) -> None:
    """The photo in the wrong layout (HWC bytes read as CHW) is classified differently: the match
    above is the layout's doing, not a model that answers every input alike."""
    _, top = classify("grpc", triton.grpc_url, "resnet18", PHOTO)
    wrong = ImageInput("input", "logits", "NHWC", "FP32", 3, 224, 224)
    with Image.open(PHOTO) as img:
        garbled = preprocess(img, wrong).reshape(1, 3, 224, 224)
    client = grpcclient.InferenceServerClient(triton.grpc_url.split("://", 1)[-1])
    try:
        tensor = grpcclient.InferInput("input", list(garbled.shape), "FP32")
        tensor.set_data_from_numpy(np.ascontiguousarray(garbled))
        result = client.infer("resnet18", [tensor], outputs=[grpcclient.InferRequestedOutput("logits", TOP)])
    finally:
        client.close()
    assert [i for _, i, _ in top_classes(result.as_numpy("logits"))] != [i for _, i, _ in top]
