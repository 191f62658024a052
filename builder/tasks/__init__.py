"""The tasks a Hugging Face checkpoint is served for, one module each, keyed by the name
transformers' pipelines and models.yaml's ``task:`` give them (docs/sources.md#adding-a-task).

``task(name)`` is the one lookup: the spec, the export stage, the data readers and
``tritonforge init`` ask the object it returns and never name a task.
"""

from __future__ import annotations

from typing import Any

from builder.tasks.base import CheckpointTask
from builder.tasks.feature_extraction import FeatureExtraction
from builder.tasks.image_classification import ImageClassification
from builder.tasks.object_detection import ObjectDetection
from builder.tasks.text_classification import TextClassification
from builder.tasks.text_ranking import TextRanking
from builder.tasks.token_classification import TokenClassification

TASKS: dict[str, CheckpointTask] = {
    t.name: t
    for t in (
        FeatureExtraction(),
        TextClassification(),
        TokenClassification(),
        TextRanking(),
        ImageClassification(),
        ObjectDetection(),
    )
}


class UnknownTask(ValueError):
    """A task name no module registers; the message lists the known ones."""


def names() -> str:
    return ", ".join(TASKS)


def task(name: object) -> CheckpointTask:
    """The task registered under ``name``."""
    found = TASKS.get(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownTask(f"unknown task {name!r}: one of {names()}")
    return found


def task_for_architecture(architecture: str, config: dict[str, Any] | None = None) -> CheckpointTask | None:
    """The task a ``config.architectures`` class name ends in (``BertForTokenClassification``); of
    several, the one that claims the checkpoint's ``config`` (one label: text-ranking), else the first."""
    found = [t for t in TASKS.values() if architecture.endswith(t.architecture_suffix)]
    claimed = [t for t in found if config is not None and t.claims(config)]
    return next(iter(claimed or found), None)
