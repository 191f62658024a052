"""Text classification: ``logits`` for each text, and ``hf_classification``'s ``LABEL``, ``SCORE``
and ``SCORES``."""

from __future__ import annotations

from typing import Any

from builder.tasks import classification
from builder.tasks.base import Checkpoint, Entry
from builder.tasks.text import TextTask


class TextClassification(TextTask):
    name = "text-classification"
    auto_class = "AutoModelForSequenceClassification"
    mapping = "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"
    architecture_suffix = "ForSequenceClassification"

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return classification.core_outputs(ckpt)

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return classification.logits(result)

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        return classification.postprocess(ckpt, name, common)

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        return classification.pipeline_steps(ckpt, name)
