"""The tokenizer models read a request's TEXT input with one shared function."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from builder.python_models.hf_tokenizer import model as hf_tokenizer
from builder.python_models.shared.text_input import decode_texts
from builder.python_models.tokenizer import model as tokenizer


def test_both_tokenizer_models_read_text_with_the_shared_module() -> None:
    shared = Path(inspect.getfile(decode_texts)).resolve()
    for model in (tokenizer, hf_tokenizer):
        assert Path(inspect.getfile(model.decode_texts)).resolve() == shared


def test_bytes_and_str_are_texts_anything_else_is_refused_naming_the_input() -> None:
    assert decode_texts(np.array(["Café".encode(), "x", b""], dtype=object)) == ["Café", "x", ""]
    with pytest.raises(ValueError, match=r"TEXT is not valid UTF-8 \(invalid start byte at byte 0\)"):
        decode_texts(np.array([b"\xff"], dtype=object))
    with pytest.raises(ValueError, match="TEXT must be strings, got float"):
        decode_texts(np.array([3.5], dtype=object))
