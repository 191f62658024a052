"""Per-token labels and grouped entities from a token classifier's logits, as transformers'
token-classification pipeline gives them with ``aggregation_strategy="simple"``.

Inputs: TEXT ([1]), and from the tokenizer model ``input_ids``, ``offset_mapping`` and
``special_tokens_mask``, and the model's ``logits`` ([-1, num_labels]). Outputs, over the tokens
that are not special (nor padding): TOKENS, TOKEN_LABELS (``id2label`` of the top class, "O"
included) and TOKEN_SCORES (its softmax score), padded with "" and 0 to the longest text of the
request; ENTITIES ([1]): a JSON list of ``{entity_group, score, word, start, end}``, adjacent tokens
of one tag joined (a ``B-`` tag starts a new entity), "O" left out, as the pipeline does. The
tokenizer and ``config.json`` are the checkpoint's, copied beside this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import (
    CHECKPOINT_CONFIG,
    ENTITIES,
    INPUT_IDS,
    LOGITS,
    OFFSET_MAPPING,
    SPECIAL_TOKENS_MASK,
    TEXT,
    TOKEN_LABELS,
    TOKEN_SCORES,
    TOKENS,
)
from .no_torch import without_torch

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None

IGNORED = ("O",)


@dataclass(frozen=True)
class Token:
    word: str
    label: str
    score: float
    start: int
    end: int


def softmax(logits: NDArray[Any]) -> NDArray[Any]:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True))


class Tagger:
    """One checkpoint's tokenizer and labels."""

    def __init__(self, tokenizer: Any, config: dict[str, Any]) -> None:
        self.tokenizer = tokenizer
        id2label = config.get("id2label") or {}
        self.labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]

    def tokens(
        self, text: str, ids: NDArray[Any], offsets: NDArray[Any], special: NDArray[Any], logits: NDArray[Any]
    ) -> list[Token]:
        """The text's tokens that are not special, each with its top label and score."""
        scores = softmax(np.asarray(logits, dtype=np.float32))
        out = []
        for i in np.flatnonzero(np.asarray(special) == 0):
            start, end = int(offsets[i][0]), int(offsets[i][1])
            word = self.tokenizer.convert_ids_to_tokens(int(ids[i]))
            if int(ids[i]) == self.tokenizer.unk_token_id:
                word = text[start:end]
            top = int(scores[i].argmax())
            out.append(Token(word, self.labels[top], float(scores[i][top]), start, end))
        return out

    def entities(self, tokens: list[Token]) -> list[dict[str, Any]]:
        """Adjacent tokens of one tag grouped, as the pipeline's ``group_entities``; "O" left out."""
        groups: list[list[Token]] = []
        for token in tokens:
            bi, tag = _tag(token.label)
            if groups and bi != "B" and _tag(groups[-1][-1].label)[1] == tag:
                groups[-1].append(token)
            else:
                groups.append([token])
        entities = [self._entity(g) for g in groups]
        return [e for e in entities if e["entity_group"] not in IGNORED]

    def _entity(self, group: list[Token]) -> dict[str, Any]:
        return {
            "entity_group": group[0].label.split("-", 1)[-1],
            "score": float(np.mean([t.score for t in group])),
            "word": self.tokenizer.convert_tokens_to_string([t.word for t in group]),
            "start": group[0].start,
            "end": group[-1].end,
        }


def _tag(label: str) -> tuple[str, str]:
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label  # not in B-/I- form: a continuation


def load_tagger(folder: str | Path) -> Tagger:
    from transformers import AutoTokenizer

    config = json.loads((Path(folder) / CHECKPOINT_CONFIG).read_text(encoding="utf-8"))
    return Tagger(AutoTokenizer.from_pretrained(str(folder)), config)


def batch_outputs(
    tagger: Tagger, texts: list[str], arrays: dict[str, NDArray[Any]]
) -> dict[str, NDArray[Any]]:
    """The four outputs for a request of ``len(texts)`` texts (rows of ``arrays``)."""
    rows = [
        tagger.tokens(text, arrays[INPUT_IDS][b], arrays[OFFSET_MAPPING][b],
                      arrays[SPECIAL_TOKENS_MASK][b], arrays[LOGITS][b])
        for b, text in enumerate(texts)
    ]  # fmt: skip
    width = max((len(r) for r in rows), default=0)
    words = np.full((len(rows), width), b"", dtype=object)
    labels = np.full((len(rows), width), b"", dtype=object)
    scores = np.zeros((len(rows), width), dtype=np.float32)
    for b, row in enumerate(rows):
        for i, token in enumerate(row):
            words[b, i], labels[b, i], scores[b, i] = token.word.encode(), token.label.encode(), token.score
    entities = np.array([[json.dumps(tagger.entities(r)).encode()] for r in rows], dtype=object)
    return {
        TOKENS: words,
        TOKEN_LABELS: labels,
        TOKEN_SCORES: scores,
        ENTITIES: entities.reshape(-1, 1),
    }


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        without_torch()
        self.tagger = load_tagger(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            names = (INPUT_IDS, OFFSET_MAPPING, SPECIAL_TOKENS_MASK, LOGITS)
            arrays = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in names}
            texts = [
                _text(v) for v in pb_utils.get_input_tensor_by_name(request, TEXT).as_numpy().reshape(-1)
            ]
            outputs = batch_outputs(self.tagger, texts, arrays)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(n, a) for n, a in outputs.items()]))  # fmt: skip
        return responses
