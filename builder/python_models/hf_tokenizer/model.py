"""A checkpoint's own tokenizer as a Triton Python model: TEXT (TYPE_STRING, [1]) -> the model's inputs.

``AutoTokenizer`` loads the checkpoint's tokenizer files copied beside this file. The outputs are
the ones the model config names: the tokenizer's ``model_input_names`` (INT64, [-1]), and for token
classification ``offset_mapping`` ([-1, 2]) and ``special_tokens_mask`` ([-1]), which the
post-processing needs. A config with a TEXT_PAIR input takes a pair per row (TEXT the query,
TEXT_PAIR the document) through the tokenizer's pair encoding (``text_pair``), truncated as the
``truncation`` parameter says (``only_second`` for a cross-encoder: the document is cut, never the
query; a query too long to leave room for any of its document fails its request), and may answer
NUM_TOKENS ([1]): each pair's tokens before truncation, which tell a caller that a pair was cut and
count its usage. Each request is tokenized on its own, its texts padded to its own longest
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

from .contract import MAX_LENGTH, NUM_TOKENS, OFFSET_MAPPING, SPECIAL_TOKENS_MASK, TEXT, TEXT_PAIR, TRUNCATION
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


def encode(
    tokenizer: Any, texts: list[str], names: list[str], max_length: int, pairs: list[str] | None = None,
    truncation: bool | str = True,
) -> dict[str, NDArray[Any]]:  # fmt: skip
    """int64 arrays [len(texts), longest] (offset_mapping [.., longest, 2]; NUM_TOKENS [.., 1]) for
    ``names``; ``pairs``: each text's second text, encoded as the tokenizer's ``text_pair``."""
    encoded = tokenizer(
        texts, pairs, padding=True, truncation=truncation, max_length=max_length, return_tensors="np",
        return_offsets_mapping=OFFSET_MAPPING in names,
        return_special_tokens_mask=SPECIAL_TOKENS_MASK in names,
    )  # fmt: skip
    arrays = {name: np.asarray(encoded[name], dtype=np.int64) for name in names if name != NUM_TOKENS}
    if NUM_TOKENS in names:
        whole = tokenizer(texts, pairs, truncation=False, verbose=False)["input_ids"]
        arrays[NUM_TOKENS] = np.array([[len(ids)] for ids in whole], dtype=np.int64).reshape(-1, 1)
    return arrays


def read_texts(request: Any, names: list[str]) -> list[list[str]]:
    """The request's texts of each input in ``names``, one list per input, of equal lengths."""
    columns = [decode_texts(pb_utils.get_input_tensor_by_name(request, n).as_numpy()) for n in names]
    if len({len(c) for c in columns}) > 1:
        raise ValueError(f"{' and '.join(names)} must hold as many texts each")
    return columns


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.names = [o["name"] for o in config["output"]]
        self.inputs = [TEXT, *(TEXT_PAIR for i in config["input"] if i["name"] == TEXT_PAIR)]
        parameters = config["parameters"]
        self.max_length = int(parameters[MAX_LENGTH]["string_value"])
        self.truncation = parameters.get(TRUNCATION, {}).get("string_value") or True
        without_torch()
        self.tokenizer = load_tokenizer(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                texts, *pairs = read_texts(request, self.inputs)
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            try:
                arrays = encode(
                    self.tokenizer, texts, self.names, self.max_length, pairs[0] if pairs else None,
                    self.truncation,
                )  # fmt: skip
            except Exception as exc:  # the tokenizer's own refusal (a query too long for only_second)
                message = f"cannot tokenize to {self.max_length} tokens, truncation {self.truncation}: {exc}"
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
                continue
            outputs = [pb_utils.Tensor(n, arrays[n]) for n in self.names]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
