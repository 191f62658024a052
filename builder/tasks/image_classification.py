"""Image classification: ``logits`` for each image, and ``hf_classification``'s ``LABEL``, ``SCORE``
and ``SCORES``."""

from __future__ import annotations

from typing import Any

from builder.tasks import classification
from builder.tasks.base import Checkpoint, Entry
from builder.tasks.image import ImageTask


class ImageClassification(ImageTask):
    name = "image-classification"
    auto_class = "AutoModelForImageClassification"
    mapping = "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"
    architecture_suffix = "ForImageClassification"

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return classification.core_outputs(ckpt)

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return classification.logits(result)

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        return classification.postprocess(ckpt, name, common)

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        return classification.pipeline_steps(ckpt, name)
