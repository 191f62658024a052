"""Checkpoint records as the spec reads them, made by hand for the task tests, and a task's
entries composed and validated as a whole spec."""

from __future__ import annotations

from pathlib import Path

from builder.spec import Spec
from builder.tasks import task
from builder.tasks.base import Checkpoint

TEXT_INPUTS = ["input_ids", "token_type_ids", "attention_mask"]
TOKENIZER = ["ckpt/tokenizer.json", "ckpt/tokenizer_config.json", "ckpt/config.json"]
PROCESSOR = ["ckpt/preprocessor_config.json", "ckpt/config.json"]


def text(name: str, labels: int = 2, max_length: int = 64) -> Checkpoint:
    return Checkpoint(
        Path("ckpt"), "ckpt", task(name), list(TEXT_INPUTS), 32, {i: f"L{i}" for i in range(labels)},
        max_length, [], list(TOKENIZER),
    )  # fmt: skip


def image(name: str, labels: int = 3) -> Checkpoint:
    return Checkpoint(
        Path("ckpt"), "ckpt", task(name), ["pixel_values"], 32, {i: f"L{i}" for i in range(labels)}, 0,
        [3, 32, 32], list(PROCESSOR),
    )  # fmt: skip


def composed(ckpt: Checkpoint, name: str = "m", **entry: object) -> Spec:
    """The spec ``{name, source, task, **entry}`` becomes, as ``load_spec`` composes it."""
    core = ckpt.task.core_entry(ckpt, {"name": name, "source": ckpt.source, "task": ckpt.task.name, **entry})
    batch = int(core["max_batch_size"])
    return Spec.model_validate({
        "models": [core],
        "python_models": ckpt.task.python_models(ckpt, name, batch),
        "ensembles": [ckpt.task.ensemble(ckpt, name, batch)],
    })  # fmt: skip
