"""A text task's data: texts, one a line, through the checkpoint's tokenizer (comments and blank
lines skipped, truncated at the profile's longest), the sample texts where there are none, and the
token type ids the traced model is given as zeros."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.tasks import task
from builder.tasks.base import CoreInputs
from builder.tasks.text import SAMPLE_TEXTS
from tests.builder.fixtures import hf_checkpoints as hf

INPUTS = ["input_ids", "token_type_ids", "attention_mask"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text")
    hf.save_tokenizer(root)
    return root


def _core(folder: Path, longest: int = 64) -> CoreInputs:
    return CoreInputs(folder, {n: [longest] for n in INPUTS})


def test_a_text_file_is_read_one_text_a_line(folder: Path, tmp_path: Path) -> None:
    path = tmp_path / "texts.txt"
    path.write_text("# a comment\nthe cat sat on the mat\n\n  \njohn lives in berlin\n", encoding="utf-8")
    arrays = task("text-classification").read_data(path, _core(folder))
    assert list(arrays) == INPUTS and all(a.dtype == "int64" for a in arrays.values())
    assert arrays["input_ids"].shape == (2, 8)  # [CLS] six words [SEP], the shorter text padded
    assert arrays["attention_mask"][1].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert task("token-classification").read_data(path, _core(folder, longest=4))["input_ids"].shape == (2, 4)


def test_no_texts_or_no_text_file_is_a_value_error_for_the_data_reader(folder: Path, tmp_path: Path) -> None:
    text = task("feature-extraction")
    (tmp_path / "empty.txt").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no texts"):
        text.read_data(tmp_path / "empty.txt", _core(folder))
    (tmp_path / "bytes.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UnicodeDecodeError):
        text.read_data(tmp_path / "bytes.txt", _core(folder))
    assert text.data_description == "a text file, one a line"


def test_without_data_the_sample_texts_are_tokenized(folder: Path) -> None:
    arrays = task("feature-extraction").sample_inputs(_core(folder), 3)
    assert arrays is not None and arrays["input_ids"].shape[0] == 3 and len(SAMPLE_TEXTS) >= 8


def test_token_type_ids_are_zeros_where_the_model_takes_them() -> None:
    import torch

    ids = torch.tensor([[2, 5, 3]])
    text = task("text-classification")
    fed = text.feed({"input_ids": ids}, {"input_ids", "token_type_ids", "attention_mask"})
    assert fed["token_type_ids"].tolist() == [[0, 0, 0]]
    assert "token_type_ids" not in text.feed({"input_ids": ids}, {"input_ids", "attention_mask"})
