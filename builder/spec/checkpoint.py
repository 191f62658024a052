"""A Hugging Face checkpoint folder as a ``models:`` entry: what it states, filled into the spec.

``{name: x, source: <folder with config.json>, task: <task>}`` is a whole entry. The folder's
config, tokenizer or image-processor files give the core model's tensors (the tokenizer's
``model_input_names`` or ``pixel_values`` in; per task ``last_hidden_state`` and the mean-pooled
``embedding``, or ``logits``), and the entry brings its own Python-backend models and ensemble:
``x_preprocess`` (the checkpoint's tokenizer or image processor), ``x_postprocess`` (labels from
``id2label`` and scores; not for feature extraction) and ``x_pipeline`` (text or image bytes in).
What the entry states wins. transformers is imported only when the spec has such an entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from builder.errors import SpecError
from builder.python_models.hf_image_processor.contract import PIXEL_VALUES, PROCESSOR_FILES
from builder.python_models.shared.processing_contract import (
    CHECKPOINT_CONFIG,
    ENTITIES,
    IMAGE,
    INPUT_IDS,
    LABEL,
    LOGITS,
    MAX_LENGTH,
    OFFSET_MAPPING,
    SCORE,
    SCORES,
    SPECIAL_TOKENS_MASK,
    TEXT,
    TOKEN_LABELS,
    TOKEN_SCORES,
    TOKENS,
)
from builder.spec.kinds import model_source_kind

PYTHON_MODELS = Path(__file__).parents[1] / "python_models"
DEFAULT_MAX_BATCH_SIZE = 8
MAX_SEQUENCE = 512  # the profile's longest text, unless the checkpoint allows fewer tokens
OPT_SEQUENCE = 128
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "fp32": {"min_cosine": 0.9999},
    "fp16": {"min_cosine": 0.999},
    "int8": {"min_cosine": 0.98},
    "int8_dynamic": {"min_cosine": 0.98},
}
# Files of a tokenizer a checkpoint may carry; the ones present are copied beside model.py.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
)  # fmt: skip
IMAGE_PROCESSOR_FILES = PROCESSOR_FILES


class Task(str, Enum):
    """What a checkpoint is served for, named as transformers' pipelines name it."""

    FEATURE_EXTRACTION = "feature-extraction"
    TEXT_CLASSIFICATION = "text-classification"
    TOKEN_CLASSIFICATION = "token-classification"
    IMAGE_CLASSIFICATION = "image-classification"

    @property
    def text(self) -> bool:
        return self is not Task.IMAGE_CLASSIFICATION


@dataclass(frozen=True)
class TaskClasses:
    """What transformers names for a task (as Optimum's TasksManager maps tasks to auto classes)."""

    auto_class: str  # the AutoModel class the export stage loads the checkpoint with
    mapping: str  # its model_type -> class mapping: the architectures that can do the task
    architecture_ending: str  # config.architectures names that end so do it (`tritonforge init`)


TASKS = {
    Task.FEATURE_EXTRACTION: TaskClasses("AutoModel", "MODEL_MAPPING_NAMES", "Model"),
    Task.TEXT_CLASSIFICATION: TaskClasses(
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
        "ForSequenceClassification",
    ),
    Task.TOKEN_CLASSIFICATION: TaskClasses(
        "AutoModelForTokenClassification",
        "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
        "ForTokenClassification",
    ),
    Task.IMAGE_CLASSIFICATION: TaskClasses(
        "AutoModelForImageClassification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "ForImageClassification",
    ),
}


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint folder states that the spec needs."""

    folder: Path
    source: str  # as the spec writes it (relative to the spec's folder)
    task: Task
    inputs: list[str]  # the tokenizer's model_input_names, or ["pixel_values"]
    hidden_size: int
    labels: dict[int, str]
    max_length: int  # text: tokens; images: 0
    image_dims: list[int]  # images: [C, H, W]
    files: list[str]  # tokenizer / image-processor files, as paths the spec resolves

    def file(self, name: str) -> str:
        return f"{self.source.rstrip('/')}/{name}"


def is_checkpoint_entry(entry: dict[str, Any], spec_dir: Path) -> bool:
    """The entry names a task, or its source is a folder (of no other kind's form)."""
    source = entry.get("source")
    folder = isinstance(source, str) and model_source_kind(source, checkpoint=False) is None
    return "task" in entry or (folder and (spec_dir / str(source)).is_dir())


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
    task = _task(entry.get("task"), fail)
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise fail(f"'{config_file}' is not JSON: {exc}", "source") from None
    _check_architecture(config, task, config_file, fail)
    if task.text:
        return _text_checkpoint(folder, source, task, fail)
    return _image_checkpoint(folder, source, fail)


def _task(value: object, fail: Any) -> Task:
    names = ", ".join(t.value for t in Task)
    if value is None:
        raise fail(f"required for a checkpoint folder: one of {names}", "task")
    try:
        return Task(value)
    except ValueError:
        raise fail(f"unknown task {value!r}: one of {names}", "task") from None


def _check_architecture(config: dict[str, Any], task: Task, config_file: Path, fail: Any) -> None:
    from transformers.models.auto import modeling_auto

    model_type = config.get("model_type")
    mapping = getattr(modeling_auto, TASKS[task].mapping)
    if model_type not in mapping:
        raise fail(f"model_type {model_type!r} in '{config_file}' cannot do {task.value}", "task")


def task_of(config_file: Path) -> Task | None:
    """The task ``config.architectures`` names, when all its classes name the same one."""
    try:
        architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None
    tasks = {_architecture_task(str(a)) for a in architectures}
    return tasks.pop() if len(tasks) == 1 else None


def _architecture_task(architecture: str) -> Task | None:
    for task, classes in TASKS.items():
        if architecture.endswith(classes.architecture_ending):
            return task
    return None


def _auto_config(folder: Path, fail: Any) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as exc:
        raise fail(f"transformers cannot read '{folder / 'config.json'}': {exc}", "source") from None


def _text_checkpoint(folder: Path, source: str, task: Task, fail: Any) -> Checkpoint:
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
        folder, source, task, list(tokenizer.model_input_names), int(config.hidden_size),
        _labels(config), min(limits), [], [],
    )  # fmt: skip
    return _with_files(ckpt, files)


def _image_checkpoint(folder: Path, source: str, fail: Any) -> Checkpoint:
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
    ckpt = Checkpoint(
        folder, source, Task.IMAGE_CLASSIFICATION, [PIXEL_VALUES], hidden, _labels(config), 0,
        [channels, height, width], [],
    )  # fmt: skip
    return _with_files(ckpt, list(IMAGE_PROCESSOR_FILES))


def _image_size(processor: Any, config: Any) -> tuple[int, int]:
    """The pixel_values height and width the processor makes: its crop, else its fixed size."""
    for attr in ("crop_size", "size"):
        size = getattr(processor, attr, None)
        height, width = getattr(size, "height", None), getattr(size, "width", None)
        if isinstance(size, dict):
            height, width = size.get("height"), size.get("width")
        if height and width and (attr == "size" or getattr(processor, "do_center_crop", False)):
            return int(height), int(width)
    side = int(getattr(config, "image_size", 224))
    return side, side


def _labels(config: Any) -> dict[int, str]:
    return {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}


def _with_files(ckpt: Checkpoint, names: list[str]) -> Checkpoint:
    files = [ckpt.file(n) for n in [*names, CHECKPOINT_CONFIG]]
    return Checkpoint(**{**ckpt.__dict__, "files": files})


# The spec entries a checkpoint becomes.


def expand(raw: dict[str, Any], spec_dir: Path, *, spec_file: Path) -> dict[str, Any]:
    """``raw`` with each checkpoint entry's tensors filled in and its Python models and ensemble
    added (an entry stating a field keeps it)."""
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
        out["models"][i] = core_entry(ckpt, entry)
        batch = int(out["models"][i]["max_batch_size"])
        added["python_models"] += python_model_entries(ckpt, str(entry["name"]), batch)
        added["ensembles"].append(ensemble_entry(ckpt, str(entry["name"]), batch))
    for section, entries in added.items():
        if entries:
            existing = out.get(section)
            out[section] = [*(existing if isinstance(existing, list) else []), *entries]
    return out


def core_entry(ckpt: Checkpoint, entry: dict[str, Any]) -> dict[str, Any]:
    out = {"max_batch_size": DEFAULT_MAX_BATCH_SIZE, **entry}
    out.setdefault("inputs", [_tensor(n, "INT64", [-1]) for n in ckpt.inputs] if ckpt.task.text
                   else [_tensor(PIXEL_VALUES, "FP32", ckpt.image_dims)])  # fmt: skip
    out.setdefault("outputs", core_outputs(ckpt))
    if ckpt.task.text:
        opt = min(OPT_SEQUENCE, ckpt.max_length)
        shape = {"min": [1], "opt": [opt], "max": [ckpt.max_length]}
        out.setdefault("profiles", [{"shapes": {n: shape for n in ckpt.inputs}}])
    precisions = out.get("precisions", ["fp32"])
    if "tolerances" not in out and isinstance(precisions, list):
        out["tolerances"] = {p: DEFAULT_TOLERANCES[p] for p in precisions if p in DEFAULT_TOLERANCES}
    return out


def core_outputs(ckpt: Checkpoint) -> list[dict[str, Any]]:
    labels = len(ckpt.labels)
    if ckpt.task is Task.FEATURE_EXTRACTION:
        return [
            _tensor("last_hidden_state", "FP32", [-1, ckpt.hidden_size]),
            _tensor("embedding", "FP32", [ckpt.hidden_size]),
        ]
    if ckpt.task is Task.TOKEN_CLASSIFICATION:
        return [_tensor(LOGITS, "FP32", [-1, labels])]
    return [_tensor(LOGITS, "FP32", [labels])]


def python_model_entries(ckpt: Checkpoint, name: str, batch: int) -> list[dict[str, Any]]:
    common = {"max_batch_size": batch, "batching": {"enabled": True}}
    if ckpt.task.text:
        pre_out = [_tensor(n, "INT64", [-1]) for n in ckpt.inputs]
        if ckpt.task is Task.TOKEN_CLASSIFICATION:
            pre_out += [
                _tensor(OFFSET_MAPPING, "INT64", [-1, 2]),
                _tensor(SPECIAL_TOKENS_MASK, "INT64", [-1]),
            ]
        pre = {
            "name": f"{name}_preprocess", "path": str(PYTHON_MODELS / "hf_tokenizer"),
            "inputs": [_tensor(TEXT, "STRING", [1])], "outputs": pre_out,
            "parameters": {MAX_LENGTH: ckpt.max_length}, "files": ckpt.files, **common,
        }  # fmt: skip
    else:
        pre = {
            "name": f"{name}_preprocess", "path": str(PYTHON_MODELS / "hf_image_processor"),
            "inputs": [_tensor(IMAGE, "STRING", [1])],
            "outputs": [_tensor(PIXEL_VALUES, "FP32", ckpt.image_dims)], "files": ckpt.files, **common,
        }  # fmt: skip
    if ckpt.task is Task.FEATURE_EXTRACTION:
        return [pre]
    return [pre, _postprocess_entry(ckpt, name, common)]


def _postprocess_entry(ckpt: Checkpoint, name: str, common: dict[str, Any]) -> dict[str, Any]:
    labels = len(ckpt.labels)
    if ckpt.task is Task.TOKEN_CLASSIFICATION:
        inputs = [
            _tensor(TEXT, "STRING", [1]), _tensor(INPUT_IDS, "INT64", [-1]),
            _tensor(OFFSET_MAPPING, "INT64", [-1, 2]), _tensor(SPECIAL_TOKENS_MASK, "INT64", [-1]),
            _tensor(LOGITS, "FP32", [-1, labels]),
        ]  # fmt: skip
        outputs = [
            _tensor(TOKENS, "STRING", [-1]), _tensor(TOKEN_LABELS, "STRING", [-1]),
            _tensor(TOKEN_SCORES, "FP32", [-1]), _tensor(ENTITIES, "STRING", [1]),
        ]  # fmt: skip
        path, files = PYTHON_MODELS / "hf_token_classification", ckpt.files
    else:
        inputs = [_tensor(LOGITS, "FP32", [labels])]
        outputs = classification_outputs(labels)
        path, files = PYTHON_MODELS / "hf_classification", [ckpt.file(CHECKPOINT_CONFIG)]
    return {"name": f"{name}_postprocess", "path": str(path), "inputs": inputs, "outputs": outputs,
            "files": files, **common}  # fmt: skip


def classification_outputs(labels: int) -> list[dict[str, Any]]:
    return [
        _tensor(LABEL, "STRING", [1]),
        _tensor(SCORE, "FP32", [1]),
        _tensor(SCORES, "FP32", [labels]),
    ]


def ensemble_entry(ckpt: Checkpoint, name: str, batch: int) -> dict[str, Any]:
    """``<name>_pipeline``: text or image bytes in, labelled or pooled outputs out."""
    source = TEXT if ckpt.task.text else IMAGE
    pre, core, post = f"{name}_preprocess", name, f"{name}_postprocess"
    feeds = {n: n for n in ckpt.inputs}
    steps: list[dict[str, Any]] = []
    if ckpt.task is Task.TOKEN_CLASSIFICATION:
        extra = {OFFSET_MAPPING: OFFSET_MAPPING, SPECIAL_TOKENS_MASK: SPECIAL_TOKENS_MASK}
        steps.append({"model": pre, "inputs": {TEXT: TEXT}, "outputs": feeds | extra})
    else:
        steps.append({"model": pre, "inputs": {source: source}, "outputs": feeds})
    outputs: list[dict[str, Any]]
    if ckpt.task is Task.FEATURE_EXTRACTION:
        steps.append({"model": core, "inputs": feeds, "outputs": {"last_hidden_state": "LAST_HIDDEN_STATE",
                                                                   "embedding": "EMBEDDING"}})  # fmt: skip
        outputs = [
            _tensor("LAST_HIDDEN_STATE", "FP32", [-1, ckpt.hidden_size]),
            _tensor("EMBEDDING", "FP32", [ckpt.hidden_size]),
        ]
    elif ckpt.task is Task.TOKEN_CLASSIFICATION:
        steps.append({"model": core, "inputs": feeds, "outputs": {LOGITS: LOGITS}})
        post_in = {TEXT: TEXT, INPUT_IDS: INPUT_IDS, LOGITS: LOGITS} | extra
        names = [TOKENS, TOKEN_LABELS, TOKEN_SCORES, ENTITIES]
        steps.append({"model": post, "inputs": post_in, "outputs": {n: n for n in names}})
        outputs = _postprocess_entry(ckpt, name, {})["outputs"]
    else:
        steps.append({"model": core, "inputs": feeds, "outputs": {LOGITS: LOGITS}})
        steps.append({"model": post, "inputs": {LOGITS: LOGITS},
                      "outputs": {n: n for n in (LABEL, SCORE, SCORES)}})  # fmt: skip
        outputs = classification_outputs(len(ckpt.labels))
    inputs = [_tensor(source, "STRING", [1])]
    return {"name": f"{name}_pipeline", "max_batch_size": batch, "inputs": inputs, "outputs": outputs,
            "steps": steps}  # fmt: skip


def _tensor(name: str, dtype: str, dims: list[int]) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "dims": dims}
