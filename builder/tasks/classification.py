"""What text and image classification share: ``logits`` over the whole input, turned into a label
and scores by ``hf_classification`` (``id2label`` from the checkpoint's config; softmax, or sigmoid
for one label or ``multi_label_classification``)."""

from __future__ import annotations

from typing import Any

from builder.python_models.shared.processing_contract import CHECKPOINT_CONFIG, LABEL, LOGITS, SCORE, SCORES
from builder.tasks.base import PYTHON_MODELS, Checkpoint, Entry, postprocess_name, same, tensor


def core_outputs(ckpt: Checkpoint) -> list[Entry]:
    return [tensor(LOGITS, "FP32", [len(ckpt.labels)])]


def logits(result: Any) -> Any:
    return result.logits


def postprocess(ckpt: Checkpoint, name: str, common: Entry) -> Entry:
    return {"name": postprocess_name(name), "path": str(PYTHON_MODELS / "hf_classification"),
            "inputs": core_outputs(ckpt), "outputs": outputs(len(ckpt.labels)),
            "files": [ckpt.file(CHECKPOINT_CONFIG)], **common}  # fmt: skip


def outputs(labels: int) -> list[Entry]:
    return [tensor(LABEL, "STRING", [1]), tensor(SCORE, "FP32", [1]), tensor(SCORES, "FP32", [labels])]


def pipeline_steps(ckpt: Checkpoint, name: str) -> list[Entry]:
    """The core model's logits to ``hf_classification``'s label and scores."""
    return [
        {"model": name, "inputs": same(ckpt.inputs), "outputs": same([LOGITS])},
        {"model": postprocess_name(name), "inputs": same([LOGITS]), "outputs": same([LABEL, SCORE, SCORES])},
    ]
