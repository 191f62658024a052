"""The detectors' Python-backend models without Triton: each request answered on its own (its own
number of boxes, its own threshold), a file that is not an image or an empty one refused in one
line naming it, and the checkpoint's processor handing on the sizes and mask the decoder needs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.python_models.box_decoder import model as decoder_model
from builder.python_models.hf_image_processor import model as image_model
from builder.python_models.hf_object_detection import model as queries_model
from builder.python_models.letterbox import model as letterbox_model
from tests.builder.fixtures import detectors
from tests.builder.python_models.pb_doubles import FakePb, Request


def images(*items: bytes) -> np.ndarray[Any, Any]:
    return np.array([[i] for i in items], dtype=object)


@pytest.fixture
def pb(monkeypatch: pytest.MonkeyPatch) -> type[FakePb]:
    for module in (decoder_model, queries_model, letterbox_model, image_model):
        monkeypatch.setattr(module, "pb_utils", FakePb)
    return FakePb


def config(inputs: list[str], outputs: list[str], parameters: dict[str, str]) -> dict[str, str]:
    return {"model_config": json.dumps({
        "input": [{"name": n} for n in inputs], "output": [{"name": n} for n in outputs],
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }), "model_repository": "", "model_version": ""}  # fmt: skip


OUTPUTS = ["BOXES", "SCORES", "LABELS", "CLASSES", "COUNT"]
RECIPE = {"letterbox_size": "96,96"}


def test_the_letterbox_gives_the_input_and_each_photos_upright_size(pb: type[FakePb]) -> None:
    model = letterbox_model.TritonPythonModel()
    model.initialize(config(["IMAGE"], ["images", "image_size"], RECIPE))
    photos = detectors.photos()
    (answer,) = model.execute([Request({"IMAGE": images(photos["china"], photos["flower_sideways"])})])
    assert answer.error is None and answer.outputs["images"].shape == (2, 3, 96, 96)
    assert answer.outputs["image_size"].tolist() == [[427, 640], [300, 400]]  # the sideways one upright
    assert answer.outputs["images"].min() >= 0.0 and answer.outputs["images"].max() <= 1.0
    bgr = letterbox_model.Recipe.from_parameters(
        {**RECIPE, "channels": "BGR", "layout": "NHWC", "dtype": "uint8"}
    )
    tensor, _ = bgr.tensor(photos["coffee"])
    assert tensor.shape == (96, 96, 3) and tensor.dtype == np.uint8


@pytest.mark.parametrize(
    ("data", "words"), [(b"not an image", "cannot identify"), (b"", "the image is empty")]
)
def test_a_file_that_is_no_image_gets_one_line_and_the_next_request_its_answer(
    pb: type[FakePb], data: bytes, words: str
) -> None:
    model = letterbox_model.TritonPythonModel()
    model.initialize(config(["IMAGE"], ["images", "image_size"], RECIPE))
    bad, good = model.execute(
        [Request({"IMAGE": images(data)}), Request({"IMAGE": images(detectors.photos()["coffee"])})]
    )
    assert (
        bad.error is not None
        and bad.error.message.startswith("image 0: cannot decode image")
        and words in bad.error.message
    )
    assert good.error is None


def test_the_box_decoder_answers_each_request_its_own_boxes_and_threshold(pb: type[FakePb]) -> None:
    params = {**RECIPE, "labels": json.dumps(["a", "b"]), "threshold": "0.25"}
    model = decoder_model.TritonPythonModel()
    model.initialize(config(["output0", "image_size"], OUTPUTS, params))
    head = np.zeros((1, 6, 3), dtype=np.float32)
    head[0, :, 0] = [48, 48, 20, 20, 0.9, 0.0]
    head[0, :, 1] = [10, 10, 8, 8, 0.0, 0.4]
    size = np.array([[96, 96]], dtype=np.int64)
    feed = {"output0": head, "image_size": size}
    low, high = model.execute([Request(feed), Request(feed, {"threshold": 0.5})])
    assert low.outputs["BOXES"].shape == (1, 2, 4) and low.outputs["LABELS"].tolist() == [[b"a", b"b"]]
    assert high.outputs["BOXES"].shape == (1, 1, 4) and high.outputs["COUNT"].tolist() == [[1]]
    np.testing.assert_allclose(high.outputs["BOXES"][0, 0], [38, 38, 58, 58])
    (wrong,) = model.execute([Request({"output0": head, "image_size": size}, {"threshold": "most"})])
    assert wrong.error.message.startswith("request parameter 'threshold'")


def test_the_checkpoints_processor_hands_on_mask_and_size_and_its_queries_become_boxes(
    pb: type[FakePb], tmp_path: Path
) -> None:
    from transformers import AutoImageProcessor

    folder = detectors.detr(tmp_path / "detr")
    processor = AutoImageProcessor.from_pretrained(str(folder))
    photos = detectors.photos()
    made = image_model.processed(processor, [photos["china"], photos["coffee"]])
    assert made["pixel_values"].shape == (2, 3, 64, 95) and made["pixel_mask"].shape == (2, 64, 95)
    assert made["pixel_mask"][1].sum() == 64 * 64 and made["image_size"].tolist() == [[427, 640], [256, 256]]
    with pytest.raises(ValueError, match="empty"):
        image_model.processed(processor, [b""])
    model = queries_model.TritonPythonModel()
    parameters = {"query_scores": "softmax", "top_k": "0", "threshold": "0.5"}
    model.queries = queries_model.load_queries(folder, parameters)
    model.outputs = OUTPUTS
    logits = np.array([[[4.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0]]], dtype=np.float32)  # cat; no object
    boxes = np.array([[[0.5, 0.5, 0.2, 0.4], [0.1, 0.1, 0.1, 0.1]]], dtype=np.float32)
    (answer,) = model.execute(
        [Request({"logits": logits, "pred_boxes": boxes, "image_size": np.array([[100, 200]])})]
    )
    assert answer.outputs["LABELS"].tolist() == [[b"cat"]]
    np.testing.assert_allclose(answer.outputs["BOXES"][0, 0], [80, 30, 120, 70], atol=1e-4)
    picture = io.BytesIO(photos["china_rgba"])
    assert picture.getvalue().startswith(b"\x89PNG")  # an RGBA photo decodes like the others
    assert (
        image_model.processed(processor, [photos["china_rgba"], photos["flower_grey"]])["pixel_values"].shape[
            1
        ]
        == 3
    )
