"""/v1/embeddings requests and bodies (no server)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from openai_frontend.embeddings import EmbeddingCall, check_dimensions, parse_embedding, response
from openai_frontend.protocol import OpenAIError


def _refused(body: dict[str, Any]) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        parse_embedding(body)
    assert caught.value.status == 400
    return caught.value


def test_strings_and_lists_of_strings() -> None:
    assert parse_embedding({"model": "e", "input": "hi"}) == EmbeddingCall("e", ("hi",))
    call = parse_embedding({"input": ["a", ""], "encoding_format": "base64"})
    assert call == EmbeddingCall(None, ("a", ""), base64=True)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [1, 2]}, "input"),
        ({"input": [[1, 2]]}, "input"),
        ({"input": []}, "input"),
        ({}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "model": 3}, "model"),
    ],
)
def test_bad_requests_name_their_field(body: dict[str, Any], param: str) -> None:
    assert _refused(body).param == param


def test_dimensions_only_at_the_models_own_size() -> None:
    check_dimensions(EmbeddingCall("e", ("a",), dimensions=384), "e", 384)
    with pytest.raises(OpenAIError) as caught:
        check_dimensions(EmbeddingCall("e", ("a",), dimensions=128), "e", 384)
    assert caught.value.param == "dimensions" and "384" in caught.value.message


def test_base64_is_little_endian_float32_as_openai_sends_it() -> None:
    vectors = np.array([[0.5, -1.25, 3.0], [1e-8, 0.0, 2.0]], dtype=np.float32)
    body = response("e", vectors, as_base64=True, tokens=[3, 4])
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in body["data"]]
    np.testing.assert_array_equal(np.stack(decoded), vectors)
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    floats = response("e", vectors, as_base64=False, tokens=[3, 4])["data"]
    assert [d["index"] for d in floats] == [0, 1] and floats[1]["embedding"] == [float(x) for x in vectors[1]]
