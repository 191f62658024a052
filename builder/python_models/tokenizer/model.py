"""Triton Python-backend tokenizer: TEXT (TYPE_STRING, [1]) -> input_ids, attention_mask (INT64, [-1]).

Loads ``tokenizer.json`` from its model folder, truncates at the ``max_length`` parameter and pads
to the longest text among the requests handled together (not to ``max_length``). A request with
invalid UTF-8 or a non-string input gets an error response; the others in the batch still succeed.
The helpers below import without Triton, so tests call them directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import ATTENTION_MASK, INPUT_IDS, MAX_LENGTH, TEXT
from .text_input import decode_texts

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

DEFAULT_MAX_LENGTH = 256


def load_tokenizer(path: str | Path, max_length: int = DEFAULT_MAX_LENGTH) -> Any:
    """A ``tokenizers.Tokenizer`` truncating at ``max_length`` and padding to the longest."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=max_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tok


def encode(tokenizer: Any, texts: list[str]) -> tuple[NDArray[Any], NDArray[Any]]:
    """input_ids and attention_mask, int64 [len(texts), longest]."""
    encs = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encs], dtype=np.int64).reshape(len(texts), -1)
    mask = np.array([e.attention_mask for e in encs], dtype=np.int64).reshape(len(texts), -1)
    return ids, mask


def max_length_parameter(model_config: dict[str, Any]) -> int:
    value = model_config.get("parameters", {}).get(MAX_LENGTH, {}).get("string_value")
    return int(value) if value else DEFAULT_MAX_LENGTH


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        folder = Path(args["model_repository"]) / args["model_version"]
        path = folder / "tokenizer.json"
        if not path.is_file():  # files may sit beside the version folder
            path = Path(args["model_repository"]) / "tokenizer.json"
        self.tokenizer = load_tokenizer(path, max_length_parameter(config))

    def execute(self, requests: list[Any]) -> list[Any]:
        texts: list[list[str] | None] = []
        errors: list[str | None] = []
        for request in requests:
            try:
                texts.append(decode_texts(pb_utils.get_input_tensor_by_name(request, TEXT).as_numpy()))
                errors.append(None)
            except ValueError as exc:
                texts.append(None)
                errors.append(str(exc))
        flat = [t for group in texts if group for t in group]
        ids, mask = encode(self.tokenizer, flat) if flat else (None, None)
        return self._responses(texts, errors, ids, mask)

    def _responses(self, texts: list[Any], errors: list[Any], ids: Any, mask: Any) -> list[Any]:
        responses, row = [], 0
        for group, error in zip(texts, errors, strict=True):
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)))
                continue
            n = len(group)
            outputs = [
                pb_utils.Tensor(INPUT_IDS, ids[row : row + n]),
                pb_utils.Tensor(ATTENTION_MASK, mask[row : row + n]),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
            row += n
        return responses
