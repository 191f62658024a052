"""Token classification: ``logits`` for each token, and ``hf_token_classification``'s per-token
``TOKENS``, ``TOKEN_LABELS``, ``TOKEN_SCORES`` and grouped ``ENTITIES`` (as transformers'
``aggregation_strategy="simple"``), for which the tokenizer also hands on each token's offsets and
which tokens are special."""

from __future__ import annotations

from typing import Any

from builder.python_models.shared.processing_contract import (
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
from builder.tasks.base import PYTHON_MODELS, Checkpoint, Entry, postprocess_name, same, tensor
from builder.tasks.text import TextTask


class TokenClassification(TextTask):
    name = "token-classification"
    auto_class = "AutoModelForTokenClassification"
    mapping = "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"
    architecture_suffix = "ForTokenClassification"

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor(LOGITS, "FP32", [-1, len(ckpt.labels)])]

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return result.logits

    def preprocess_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [
            *super().preprocess_outputs(ckpt),
            tensor(OFFSET_MAPPING, "INT64", [-1, 2]),
            tensor(SPECIAL_TOKENS_MASK, "INT64", [-1]),
        ]

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        inputs = [
            tensor(TEXT, "STRING", [1]), tensor(INPUT_IDS, "INT64", [-1]),
            tensor(OFFSET_MAPPING, "INT64", [-1, 2]), tensor(SPECIAL_TOKENS_MASK, "INT64", [-1]),
            *self.core_outputs(ckpt),
        ]  # fmt: skip
        outputs = [
            tensor(TOKENS, "STRING", [-1]), tensor(TOKEN_LABELS, "STRING", [-1]),
            tensor(TOKEN_SCORES, "FP32", [-1]), tensor(ENTITIES, "STRING", [1]),
        ]  # fmt: skip
        return {"name": postprocess_name(name), "path": str(PYTHON_MODELS / "hf_token_classification"),
                "inputs": inputs, "outputs": outputs, "files": ckpt.files, **common}  # fmt: skip

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        post_in = same([TEXT, INPUT_IDS, LOGITS, OFFSET_MAPPING, SPECIAL_TOKENS_MASK])
        return [
            {"model": name, "inputs": same(ckpt.inputs), "outputs": same([LOGITS])},
            {"model": postprocess_name(name), "inputs": post_in,
             "outputs": same([TOKENS, TOKEN_LABELS, TOKEN_SCORES, ENTITIES])},
        ]  # fmt: skip
