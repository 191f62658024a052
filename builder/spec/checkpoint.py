"""A Hugging Face checkpoint folder as a ``models:`` entry: the folder read, and its task's entries
filled into the spec.

``{name: x, source: <folder with config.json>, task: <task>}`` is a whole entry. This module reads
the folder into a ``Checkpoint`` record (its config, and by the task's modality its tokenizer's
``model_input_names`` and longest text, or its image processor's size; its labels and hidden size)
and the task (``builder/tasks/``) composes from it the core model's tensors, its Python-backend
models ``x_preprocess`` and ``x_postprocess`` and the ensemble ``x_pipeline``. What the entry
states wins. transformers is imported only when the spec has such an entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator

from builder.errors import SpecError
from builder.python_models.hf_image_processor.contract import PIXEL_VALUES, PROCESSOR_FILES
from builder.python_models.shared.processing_contract import CHECKPOINT_CONFIG
from builder.spec.kinds import model_source_kind
from builder.tasks import UnknownTask, names, task, task_for_architecture
from builder.tasks.base import Checkpoint, CheckpointTask, Modality

MAX_SEQUENCE = 512  # the profile's longest text, unless the checkpoint allows fewer tokens
# Files of a tokenizer a checkpoint may carry; the ones present are copied beside model.py.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
)  # fmt: skip
IMAGE_PROCESSOR_FILES = PROCESSOR_FILES


def _known_task(name: str) -> str:
    task(name)  # UnknownTask, a ValueError: pydantic's one line names the field and the known tasks
    return name


# models.yaml's ``task:``: the name a module of builder/tasks/ registers, as transformers names it.
TaskName = Annotated[str, AfterValidator(_known_task)]

Fail = Callable[[str, str], SpecError]


def is_checkpoint_entry(entry: dict[str, Any], spec_dir: Path) -> bool:
    """The entry names a task, or its source is a folder, and its source is of no graph's form (an
    .onnx file or a factory: an object detector's graph names a task too)."""
    source = entry.get("source")
    if isinstance(source, str) and model_source_kind(source, checkpoint=False) is not None:
        return False
    return "task" in entry or (isinstance(source, str) and (spec_dir / source).is_dir())


def read_checkpoint(entry: dict[str, Any], spec_dir: Path, *, spec_file: Path) -> Checkpoint:
    """The checkpoint an entry names, checked: the folder, its config.json, the task."""
    name = str(entry.get("name", "?"))

    def fail(message: str, field: str) -> SpecError:
        return SpecError(message, file=spec_file, model=name, field=field)

    source = entry.get("source")
    if not isinstance(source, str) or not source:
        raise fail("a checkpoint entry needs the checkpoint's folder", "source")
    folder = Path(source) if Path(source).is_absolute() else spec_dir / source
    if not folder.is_dir():
        raise fail(f"checkpoint folder '{source}' not found", "source")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise fail(f"'{source}' has no config.json: not a Hugging Face checkpoint folder", "source")
    served = _task(entry.get("task"), fail)
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise fail(f"'{config_file}' is not JSON: {exc}", "source") from None
    _check_architecture(config, served, config_file, fail)
    ckpt = replace(READERS[served.modality](folder, source, served, fail), config=config)
    reason = served.refusal(ckpt)
    if reason is not None:
        raise fail(f"'{source}' cannot do {served.name}: {reason}", "task")
    return ckpt


def _task(value: object, fail: Fail) -> CheckpointTask:
    if value is None:
        raise fail(f"required for a checkpoint folder: one of {names()}", "task")
    try:
        return task(value)
    except UnknownTask as exc:
        raise fail(str(exc), "task") from None


def _check_architecture(config: dict[str, Any], served: CheckpointTask, path: Path, fail: Fail) -> None:
    from transformers.models.auto import modeling_auto

    model_type = config.get("model_type")
    if model_type not in getattr(modeling_auto, served.mapping):
        raise fail(f"model_type {model_type!r} in '{path}' cannot do {served.name}", "task")


def task_of(config_file: Path) -> CheckpointTask | None:
    """The task ``config.architectures`` names, when all its classes name the same one."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        architectures = config.get("architectures") or []
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    tasks = {task_for_architecture(str(a), config) for a in architectures}
    return tasks.pop() if len(tasks) == 1 else None


def _auto_config(folder: Path, fail: Fail) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as exc:
        raise fail(f"transformers cannot read '{folder / 'config.json'}': {exc}", "source") from None


def _text_checkpoint(folder: Path, source: str, served: CheckpointTask, fail: Fail) -> Checkpoint:
    from transformers import AutoTokenizer

    config = _auto_config(folder, fail)
    files = [n for n in TOKENIZER_FILES if (folder / n).is_file()]
    if not files:
        raise fail(f"'{source}' has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)", "source")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"transformers cannot load the tokenizer in '{source}': {exc}", "source") from None
    limits = [MAX_SEQUENCE, int(getattr(config, "max_position_embeddings", MAX_SEQUENCE) or MAX_SEQUENCE)]
    if isinstance(tokenizer.model_max_length, int) and tokenizer.model_max_length > 0:
        limits.append(tokenizer.model_max_length)
    ckpt = Checkpoint(
        folder, source, served, list(tokenizer.model_input_names), int(config.hidden_size),
        _labels(config), min(limits), [], [],
    )  # fmt: skip
    return _with_files(ckpt, files)


def _image_checkpoint(folder: Path, source: str, served: CheckpointTask, fail: Fail) -> Checkpoint:
    from transformers import AutoImageProcessor

    config = _auto_config(folder, fail)
    if not (folder / IMAGE_PROCESSOR_FILES[0]).is_file():
        raise fail(f"'{source}' has no {IMAGE_PROCESSOR_FILES[0]} (the image processor's settings)", "source")
    try:
        processor = AutoImageProcessor.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"transformers cannot load the image processor in '{source}': {exc}", "source") from None
    height, width = _image_size(processor, config)
    channels = int(getattr(config, "num_channels", 3))
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    settings = {**processor.to_dict(), "image_processor_type": _processor_type(processor)}
    ckpt = Checkpoint(
        folder, source, served, [PIXEL_VALUES], hidden, _labels(config), 0, [channels, height, width], [],
        processor=settings,
    )  # fmt: skip
    return _with_files(ckpt, list(IMAGE_PROCESSOR_FILES))


def _processor_type(processor: Any) -> str:
    """The processor's class as its config names it (without the backend's suffix: ``...Pil``)."""
    return type(processor).__name__.removesuffix("Pil")


# How a checkpoint is read for each modality: its tokenizer, or its image processor.
READERS: dict[Modality, Callable[[Path, str, CheckpointTask, Fail], Checkpoint]] = {
    Modality.TEXT: _text_checkpoint,
    Modality.IMAGE: _image_checkpoint,
}


def _image_size(processor: Any, config: Any) -> tuple[int, int]:
    """The pixel_values height and width the processor makes: its crop, else its fixed size."""
    for attr in ("crop_size", "size"):
        size = getattr(processor, attr, None)
        height, width = getattr(size, "height", None), getattr(size, "width", None)
        if isinstance(size, dict):
            height, width = size.get("height"), size.get("width")
        if height and width and (attr == "size" or getattr(processor, "do_center_crop", False)):
            return int(height), int(width)
    side: Any = getattr(config, "image_size", 224)
    if isinstance(side, (list, tuple)) and len(side) == 2:  # YOLOS: [height, width]
        return int(side[0]), int(side[1])
    return int(side), int(side)


def _labels(config: Any) -> dict[int, str]:
    return {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}


def _with_files(ckpt: Checkpoint, files: list[str]) -> Checkpoint:
    return replace(ckpt, files=[ckpt.file(n) for n in [*files, CHECKPOINT_CONFIG]])


# The spec entries a checkpoint becomes.


def expand(raw: dict[str, Any], spec_dir: Path, *, spec_file: Path) -> dict[str, Any]:
    """``raw`` with each checkpoint entry's tensors filled in and its Python models and ensemble
    added, as its task composes them (an entry stating a field keeps it)."""
    models = raw.get("models")
    if not isinstance(models, list):
        return raw
    out = dict(raw)
    out["models"] = list(models)
    added: dict[str, list[dict[str, Any]]] = {"python_models": [], "ensembles": []}
    for i, entry in enumerate(models):
        if not isinstance(entry, dict) or not is_checkpoint_entry(entry, spec_dir):
            continue
        ckpt = read_checkpoint(entry, spec_dir, spec_file=spec_file)
        name = str(entry["name"])
        out["models"][i] = ckpt.task.core_entry(ckpt, entry)
        batch = int(out["models"][i]["max_batch_size"])
        added["python_models"] += ckpt.task.python_models(ckpt, name, batch)
        added["ensembles"].append(ckpt.task.ensemble(ckpt, name, batch))
    for section, entries in added.items():
        if entries:
            existing = out.get(section)
            out[section] = [*(existing if isinstance(existing, list) else []), *entries]
    return out
