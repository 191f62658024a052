"""An image request's element as bytes: the models that take encoded images (JPEG/PNG bytes in a
TYPE_STRING tensor) link to this one file. It imports nothing of the project."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, np.ndarray):  # a [1] element of a [B, 1] request
        return as_bytes(item.reshape(-1)[0])
    if isinstance(item, str):
        return item.encode("latin-1")
    raise TypeError(f"expected image bytes, got {type(item).__name__}")
