"""The checkpoint pipelines' pre-processing models answer each request as transformers would for it
alone: a text tokenized without the other requests of its batch, an image turned upright by EXIF."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from builder.python_models.hf_image_processor import model as image_model
from builder.python_models.hf_tokenizer import model as tokenizer_model
from tests.builder.fixtures import hf_checkpoints as hf
from tests.builder.python_models.pb_doubles import FakePb, Request


def request(*texts: str) -> Request:
    return Request({"TEXT": np.array([[t.encode()] for t in texts], dtype=object)})


def test_each_request_is_tokenized_as_if_sent_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf.save_tokenizer(tmp_path)
    monkeypatch.setattr(tokenizer_model, "pb_utils", FakePb)
    model = object.__new__(tokenizer_model.TritonPythonModel)
    model.names = ["input_ids", "attention_mask"]
    model.inputs, model.max_length, model.truncation = ["TEXT"], 64, True
    model.tokenizer = tokenizer_model.load_tokenizer(tmp_path)
    short, long = request("paris"), request("the cat sat on the mat and then it sat on the hat", "a b")
    together = model.execute([short, long])
    alone = [model.execute([short])[0], model.execute([long])[0]]
    for got, want in zip(together, alone, strict=True):
        assert got.error is None
        for name in model.names:
            np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
    assert together[0].outputs["attention_mask"].all()  # no padding to the other request's length
    assert not together[1].outputs["attention_mask"][1].all()  # within a request, padded to its longest


def pairs(*rows: tuple[str, str]) -> Request:
    return Request({"TEXT": np.array([[q.encode()] for q, _ in rows], dtype=object),
                    "TEXT_PAIR": np.array([[d.encode()] for _, d in rows], dtype=object)})  # fmt: skip


def test_pairs_are_tokenized_per_request_and_a_query_too_long_fails_its_request_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf.save_tokenizer(tmp_path)
    monkeypatch.setattr(tokenizer_model, "pb_utils", FakePb)
    model = object.__new__(tokenizer_model.TritonPythonModel)
    model.names = ["input_ids", "token_type_ids", "attention_mask", "NUM_TOKENS"]
    model.inputs, model.max_length, model.truncation = ["TEXT", "TEXT_PAIR"], 10, "only_second"
    model.tokenizer = tokenizer_model.load_tokenizer(tmp_path)
    good = pairs(("where is the cat", "the cat sat on the mat"), ("paris", "is a city"))
    too_long, uneven = pairs(("the cat sat on the mat and the dog ran in the park", "a")), pairs(("a", "b"))
    uneven.tensors["TEXT_PAIR"] = uneven.tensors["TEXT_PAIR"][:0]
    answers = model.execute([good, too_long, uneven])
    assert answers[0].error is None and answers[0].outputs["NUM_TOKENS"].tolist() == [[13], [7]]
    assert answers[0].outputs["token_type_ids"][0].tolist() == [0] * 6 + [1] * 4  # the document cut
    assert "cannot tokenize to 10 tokens, truncation only_second" in answers[1].error.message
    assert "TEXT and TEXT_PAIR must hold as many texts each" in answers[2].error.message


def rotated_jpeg() -> tuple[bytes, Image.Image]:
    """A JPEG stored sideways with EXIF orientation 6 (rotate 90° clockwise to view), and the
    picture as it should look."""
    upright = Image.fromarray(np.tile(np.linspace(0, 255, 64, dtype=np.uint8), (32, 1))).convert("RGB")
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what the camera wrote
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    stored.save(out, format="JPEG", exif=exif, quality=95)
    return out.getvalue(), upright


def test_an_image_is_turned_upright_by_its_exif_orientation_as_transformers_does(tmp_path: Path) -> None:
    from transformers.image_utils import load_image

    hf.vit(tmp_path)
    processor = image_model.load_processor(tmp_path)
    data, upright = rotated_jpeg()
    served = image_model.pixel_values(processor, [data])
    expected = processor(images=[load_image(Image.open(io.BytesIO(data)))], return_tensors="np")[
        "pixel_values"
    ]
    np.testing.assert_allclose(served, expected, atol=1e-6)
    sideways = processor(images=[Image.open(io.BytesIO(data)).convert("RGB")], return_tensors="np")
    assert not np.allclose(served, sideways["pixel_values"], atol=1e-2)  # the orientation mattered
    assert load_image(Image.open(io.BytesIO(data))).size == upright.size
