"""A checkpoint's own tokenizer as a Triton Python model: TEXT (TYPE_STRING, [1]) -> the model's inputs.

``AutoTokenizer`` loads the checkpoint's tokenizer files copied beside this file. The outputs are
the ones the model config names: the tokenizer's ``model_input_names`` (INT64, [-1]), and for token
classification ``offset_mapping`` ([-1, 2]) and ``special_tokens_mask`` ([-1]), which the
post-processing needs. Each request is tokenized on its own, its texts padded to its own longest
and truncated at the ``max_length`` parameter: a request's answer never depends on the requests
Triton's dynamic batcher handed over with it (padding to another request's length would change a
feature extractor's ``last_hidden_state``). Requests of equal length still batch downstream. A
request with invalid UTF-8 gets an error response; the others still succeed. The helpers import
without Triton, so tests call them directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import MAX_LENGTH, OFFSET_MAPPING, SPECIAL_TOKENS_MASK, TEXT
from .no_torch import without_torch
from .text_input import decode_texts

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

EXTRA_OUTPUTS = (OFFSET_MAPPING, SPECIAL_TOKENS_MASK)


def load_tokenizer(folder: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def encode(tokenizer: Any, texts: list[str], names: list[str], max_length: int) -> dict[str, NDArray[Any]]:
    """int64 arrays [len(texts), longest] (offset_mapping [.., longest, 2]) for ``names``."""
    encoded = tokenizer(
        texts, padding=True, truncation=True, max_length=max_length, return_tensors="np",
        return_offsets_mapping=OFFSET_MAPPING in names,
        return_special_tokens_mask=SPECIAL_TOKENS_MASK in names,
    )  # fmt: skip
    return {name: np.asarray(encoded[name], dtype=np.int64) for name in names}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.names = [o["name"] for o in config["output"]]
        self.max_length = int(config["parameters"][MAX_LENGTH]["string_value"])
        without_torch()
        self.tokenizer = load_tokenizer(Path(args["model_repository"]) / args["model_version"])

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
        responses = []
        for group, error in zip(texts, errors, strict=True):
            if error is not None or group is None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))))
                continue
            arrays = encode(self.tokenizer, group, self.names, self.max_length)
            outputs = [pb_utils.Tensor(n, arrays[n]) for n in self.names]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
