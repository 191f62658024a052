"""A request's TEXT input (TYPE_STRING) as strings: the tokenizer models' (``tokenizer``,
``hf_tokenizer``) shared reading of it. Imports nothing but numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def decode_texts(values: NDArray[Any]) -> list[str]:
    """A request's TEXT tensor (bytes or str objects) as strings; ValueError if it is not UTF-8 text."""
    texts = []
    for value in np.asarray(values, dtype=object).reshape(-1):
        if isinstance(value, bytes):
            try:
                texts.append(value.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ValueError(f"TEXT is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        elif isinstance(value, str):
            texts.append(value)
        else:
            raise ValueError(f"TEXT must be strings, got {type(value).__name__}")
    return texts
