"""``/v1/embeddings`` requests and responses in OpenAI's shapes.

``input`` is a string or a list of strings (token-id arrays are refused: the model tokenizes its
own text); ``encoding_format`` ``base64`` is the vector's little-endian float32 bytes, as OpenAI
sends it (the ``openai`` SDK asks for it by default and decodes it); ``dimensions`` is accepted
only when it equals the model's own size (no served model is trained to be truncated).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .protocol import bad_request

MAX_INPUTS = 2048  # OpenAI's limit on the texts of one request
FORMATS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingCall:
    model: str | None  # None: the one embedding model served
    texts: tuple[str, ...]
    base64: bool = False
    dimensions: int | None = None


def parse_embedding(body: Mapping[str, Any]) -> EmbeddingCall:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request(f"model must be a string, got {model!r}", "model")
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in FORMATS:
        raise bad_request(
            f"encoding_format must be one of {', '.join(FORMATS)}, got {fmt!r}", "encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise bad_request(f"dimensions must be a positive integer, got {dimensions!r}", "dimensions")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_request(f"user must be a string, got {user!r}", "user")
    return EmbeddingCall(model or None, _texts(body.get("input")), fmt == "base64", dimensions)


def _texts(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty list of strings", "input")
    if not all(isinstance(v, str) for v in value):
        raise bad_request("input: token-id arrays are not supported (the model tokenizes its own text): "
                          "send strings", "input")  # fmt: skip
    if len(value) > MAX_INPUTS:
        raise bad_request(f"input holds {len(value)} texts, more than {MAX_INPUTS}", "input")
    return tuple(value)


def check_dimensions(call: EmbeddingCall, model: str, dims: int) -> None:
    if call.dimensions is not None and call.dimensions != dims:
        raise bad_request(f"dimensions: model `{model}` returns {dims}-dimensional vectors and does not "
                          "support other sizes", "dimensions")  # fmt: skip


def encode(vector: np.ndarray[Any, Any], as_base64: bool) -> list[float] | str:
    if as_base64:
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector.astype(np.float32)]


def response(
    model: str, vectors: np.ndarray[Any, Any], as_base64: bool, tokens: Sequence[int]
) -> dict[str, Any]:
    """The CreateEmbeddingResponse body (built as a dict: the SDK type says floats only)."""
    data = [
        {"object": "embedding", "index": i, "embedding": encode(v, as_base64)} for i, v in enumerate(vectors)
    ]
    total = int(sum(tokens))
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": total, "total_tokens": total}}  # fmt: skip
