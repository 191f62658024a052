"""An object detector's ``detection:`` block, and a YOLO-style graph's entry composed from it.

``{name, source: det.onnx, task: object-detection, detection: {...}}`` is a whole entry: the graph
states the image input and the head, the block says how an image becomes that input (the
letterbox) and how the head is read and suppressed. ``expand_dense`` checks the block against the
graph and adds the entry's Python-backend models and ensemble (``builder/tasks/object_detection.py``
composes them), each mistake one line naming its field. A DETR-family checkpoint's block is written
by its task (``format: detr``: how its image processor reads the queries).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from builder.errors import SpecError
from builder.python_models.hf_object_detection import contract
from builder.python_models.shared.detection import DenseHead
from builder.spec.kinds import ModelSourceKind, model_source_kind
from builder.tasks.object_detection import TOLERANCES, Decoding, DenseGraph, dense_entries

TASK = "object-detection"
YOLO_THRESHOLD = 0.25  # Ultralytics' predict default (conf)
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LetterboxSpec(_Strict):
    """How an image fits the graph's input: resized with its aspect kept, centred, padded."""

    size: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=2, max_length=2)] | None = None
    pad: Annotated[int, Field(ge=0, le=255)] = 114  # the padding's grey level
    resample: Literal["bilinear", "nearest", "bicubic"] = "bilinear"  # Pillow's filter


YOLO_FIELDS = ("output", "letterbox", "scale", "channels", "box_format", "class_scores", "layout",
               "iou_threshold", "class_agnostic", "max_detections", "labels")  # fmt: skip
DETR_FIELDS = ("query_scores", "top_k")


class Detection(_Strict):
    """How a detector's outputs become boxes (and, for a YOLO-style graph, its input an image)."""

    format: Literal["yolo", "detr"] = "yolo"  # a dense head [4 + classes, anchors]; DETR's queries
    threshold: Probability | None = None  # scores kept by default (yolo 0.25, detr the pipeline's 0.5)
    # format detr: as the checkpoint's image processor reads the queries
    query_scores: Literal["softmax", "sigmoid"] = "softmax"
    top_k: Annotated[int, Field(ge=0)] = 0
    # format yolo: the image ...
    letterbox: LetterboxSpec = LetterboxSpec()
    scale: Annotated[float, Field(gt=0)] = 255.0  # pixel values are divided by it
    channels: Literal["RGB", "BGR"] = "RGB"
    # ... and the head
    output: str | None = None  # the head's output (unset: the graph's only one)
    layout: Literal["channels_first", "anchors_first"] | None = None  # unset: read from the labels
    box_format: Literal["cxcywh", "xyxy", "xywh"] = "cxcywh"
    class_scores: Literal["probabilities", "logits"] = "probabilities"
    iou_threshold: Probability = 0.45
    class_agnostic: bool = False
    max_detections: Annotated[int, Field(ge=1)] = 300
    labels: list[str] | str | None = None  # the class names in id order, or a file of them, one a line

    @model_validator(mode="after")
    def _fields_of_its_format(self) -> Detection:
        foreign = DETR_FIELDS if self.format == "yolo" else YOLO_FIELDS
        fields = type(self).model_fields
        given = sorted(f for f in foreign if getattr(self, f) != fields[f].default)
        if given:
            raise ValueError(f"{given[0]} is not a field of format {self.format}")
        return self

    @property
    def default_threshold(self) -> float:
        if self.threshold is not None:
            return self.threshold
        return YOLO_THRESHOLD if self.format == "yolo" else 0.5

    def rules(self) -> DenseHead:
        return DenseHead(
            box_format=self.box_format, class_scores=self.class_scores,
            channels_first=self.layout != "anchors_first", threshold=self.default_threshold,
            iou_threshold=self.iou_threshold, class_agnostic=self.class_agnostic,
            max_detections=self.max_detections,
        )  # fmt: skip

    def decoding(self) -> Decoding:
        """What the verification decodes a variant's outputs with, as the server does."""
        if self.format == "detr":
            return Decoding("detr", self.default_threshold, self.query_scores, self.top_k)
        return Decoding("yolo", self.default_threshold, head=self.output or "", dense=self.rules())

    def recipe(self, image_dims: list[int], dtype: str) -> dict[str, str]:
        """The ``letterbox`` model's parameters for the graph's image input (served and read alike)."""
        size = self.letterbox.size or [0, 0]
        return {
            contract.LETTERBOX_SIZE: f"{size[0]},{size[1]}", contract.PAD_VALUE: str(self.letterbox.pad),
            contract.RESAMPLE: self.letterbox.resample, contract.SCALE: str(self.scale),
            contract.CHANNELS: self.channels, contract.LAYOUT: "NCHW" if image_dims[0] == 3 else "NHWC",
            contract.DTYPE: {"FP16": "float16", "UINT8": "uint8"}.get(dtype, "float32"),
        }  # fmt: skip


class DetectionTolerance(_Strict):
    """A detector's variant against the reference, box by box (after decoding, as served)."""

    min_matched: Probability = 0.95  # the share of boxes paired: same label, IoU >= iou
    iou: Probability = 0.5
    max_score_diff: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05  # of any paired boxes


# -- a YOLO-style graph's entry --------------------------------------------------------------------


def is_dense_detector(entry: Any) -> bool:
    """A graph source (an .onnx file or a factory) whose entry names the object-detection task."""
    if not isinstance(entry, dict) or entry.get("task") != TASK or not isinstance(entry.get("source"), str):
        return False
    return model_source_kind(entry["source"], checkpoint=False) in (
        ModelSourceKind.ONNX,
        ModelSourceKind.FACTORY,
    )


def dense_defaults(entry: dict[str, Any]) -> dict[str, Any]:
    """Before the graph fills the entry: a detector's default tolerances are the matched boxes."""
    if not is_dense_detector(entry) or "tolerances" in entry:
        return entry
    precisions = entry.get("precisions", ["fp32"])
    if not isinstance(precisions, list):
        return entry
    return {**entry, "tolerances": {p: TOLERANCES[p] for p in precisions if p in TOLERANCES}}


def expand_dense(raw: dict[str, Any], spec_dir: Path, *, spec_file: Path) -> dict[str, Any]:
    """``raw`` with each YOLO-style entry's ``detection`` block checked against its graph (filled
    in: the head, its layout, the labels, the letterbox size) and its Python models and ensemble
    added."""
    models = raw.get("models")
    if not isinstance(models, list) or not any(is_dense_detector(e) for e in models):
        return raw
    out = {**raw, "models": list(models)}
    python_models, ensembles = [], []
    for i, entry in enumerate(models):
        if is_dense_detector(entry):
            out["models"][i], graph = _dense_graph(entry, spec_dir, spec_file)
            pre_post, ensemble = dense_entries(graph)
            python_models += pre_post
            ensembles.append(ensemble)
    for section, added in (("python_models", python_models), ("ensembles", ensembles)):
        existing = out.get(section)
        out[section] = [*(existing if isinstance(existing, list) else []), *added]
    return out


def _dense_graph(entry: dict[str, Any], spec_dir: Path, spec_file: Path) -> tuple[dict[str, Any], DenseGraph]:
    name = str(entry.get("name", "?"))

    def fail(message: str, field: str) -> SpecError:
        return SpecError(message, file=spec_file, model=name, field=field)

    try:
        block = Detection.model_validate(entry.get("detection") or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise fail(
            err["msg"].removeprefix("Value error, "), f"detection.{where}" if where else "detection"
        ) from None
    if block.format != "yolo":
        raise fail(
            "a graph source's head is read as format yolo (detr is a checkpoint's)", "detection.format"
        )
    batch = entry.get("max_batch_size", 0)
    if not isinstance(batch, int) or batch < 1:
        raise fail(
            "a YOLO-style graph must take a batch (its first axis dynamic: export it with a dynamic batch)",
            "max_batch_size",
        )
    inputs, outputs = entry.get("inputs") or [], entry.get("outputs") or []
    if len(inputs) != 1:
        raise fail(f"a YOLO-style graph takes one image input, this one takes {len(inputs)}", "inputs")
    image = dict(inputs[0])
    dims = list(image.get("dims") or [])
    if len(dims) != 3:
        raise fail(
            f"the image input '{image.get('name')}' has dims {dims}, not [3, H, W] or [H, W, 3]", "inputs"
        )
    if dims[0] != 3 and dims[2] != 3:
        raise fail(
            f"{block.channels} needs 3 channels; the graph's image input '{image['name']}' has dims {dims}",
            "detection.channels",
        )
    if image.get("dtype") not in ("FP32", "FP16", "UINT8"):
        raise fail(
            f"the image input '{image['name']}' is {image.get('dtype')}, not FP32, FP16 or UINT8", "inputs"
        )
    spatial = dims[1:] if dims[0] == 3 else dims[:2]
    size = _letterbox_size(block, spatial, image["name"], fail)
    image["dims"] = [3, *size] if dims[0] == 3 else [*size, 3]
    head = _head(block, outputs, fail)
    labels = _labels(block.labels, spec_dir, fail)
    channels_first, labels = _layout(block, head, labels, fail)
    filled = block.model_copy(update={
        "output": head["name"], "layout": "channels_first" if channels_first else "anchors_first",
        "labels": labels, "letterbox": block.letterbox.model_copy(update={"size": size}),
    })  # fmt: skip
    out = {**entry, "inputs": [image, *inputs[1:]], "detection": filled.model_dump(mode="json")}
    if dims != image["dims"]:  # a dynamic input made the letterbox's size: no profile for it
        out["profiles"] = _without(entry.get("profiles"), image["name"])
        if not out["profiles"]:
            out.pop("profiles")
    parameters: dict[str, str | int | float | bool] = {
        **filled.recipe(image["dims"], str(image["dtype"])), contract.BOX_FORMAT: filled.box_format,
        contract.CLASS_SCORES: filled.class_scores, contract.DEFAULT_THRESHOLD: filled.default_threshold,
        contract.IOU_THRESHOLD: filled.iou_threshold, contract.MAX_DETECTIONS: filled.max_detections,
        contract.CLASS_AGNOSTIC: str(filled.class_agnostic).lower(),
    }  # fmt: skip
    graph = DenseGraph(name, batch, image, dict(head), channels_first, labels, (size[0], size[1]), parameters)
    return out, graph


def _letterbox_size(block: Detection, spatial: list[int], image: str, fail: Any) -> list[int]:
    given = block.letterbox.size
    if -1 in spatial:
        if given is None:
            raise fail(
                f"the graph's image input '{image}' has a dynamic height or width: give [height, width]",
                "detection.letterbox.size",
            )
        if any(s not in (-1, g) for s, g in zip(spatial, given, strict=True)):
            raise fail(
                f"{given} does not fit the graph's image input '{image}' ({spatial})",
                "detection.letterbox.size",
            )
        return list(given)
    if given is not None and list(given) != spatial:
        raise fail(
            f"{given} differs from the graph's image input '{image}' ({spatial})", "detection.letterbox.size"
        )
    return spatial


def _head(block: Detection, outputs: list[Any], fail: Any) -> dict[str, Any]:
    names = [str(o.get("name")) for o in outputs if isinstance(o, dict)]
    if block.output is not None:
        if block.output not in names:
            raise fail(
                f"'{block.output}' is not an output of the graph ({', '.join(names)})", "detection.output"
            )
        head = next(o for o in outputs if o.get("name") == block.output)
    elif len(outputs) != 1:
        raise fail(f"the graph has outputs {', '.join(names)}: name the head", "detection.output")
    else:
        head = outputs[0]
    dims = list(head.get("dims") or [])
    if len(dims) != 2:
        raise fail(
            f"the head '{head.get('name')}' has dims {dims}, not [4 + classes, anchors] (beyond the batch)",
            "detection.output",
        )
    return dict(head)


def _labels(labels: list[str] | str | None, spec_dir: Path, fail: Any) -> list[str] | None:
    if not isinstance(labels, str):
        return labels
    path = spec_dir / labels
    try:
        names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read '{labels}': {type(exc).__name__}: {exc}", "detection.labels") from None
    if not names:
        raise fail(f"'{labels}' names no class", "detection.labels")
    return names


def _layout(
    block: Detection, head: dict[str, Any], labels: list[str] | None, fail: Any
) -> tuple[bool, list[str]]:
    """Whether the head is [4 + classes, anchors], and the class names (LABEL_<i> where unnamed)."""
    dims = list(head["dims"])
    if block.layout is not None:
        axes = [0 if block.layout == "channels_first" else 1]
    elif labels is not None:
        axes = [a for a in (0, 1) if dims[a] == 4 + len(labels)]
    else:
        static = [a for a in (0, 1) if dims[a] > 4]
        axes = [min(static, key=lambda a: dims[a])] if static else []
    if not axes:
        if dims == [-1, -1]:
            raise fail(
                f"the head '{head['name']}' has dynamic dims {dims}: give its layout", "detection.layout"
            )
        if labels is not None:
            raise fail(
                f"{len(labels)} labels need a head of 4 + {len(labels)} = {4 + len(labels)} channels; "
                f"'{head['name']}' has dims {dims}",
                "detection.labels",
            )
        raise fail(
            f"the head '{head['name']}' ({dims}) says no class count: give the labels", "detection.labels"
        )
    axis = axes[0]
    channels = dims[axis]
    if channels != -1 and channels <= 4:
        raise fail(
            f"the head '{head['name']}' has {channels} channels: 4 box values and classes", "detection.output"
        )
    if labels is None:
        if channels == -1:
            raise fail(
                f"the head '{head['name']}' ({dims}) says no class count: give the labels", "detection.labels"
            )
        labels = [f"LABEL_{i}" for i in range(channels - 4)]
    elif channels not in (-1, 4 + len(labels)):
        raise fail(
            f"{len(labels)} labels need {4 + len(labels)} channels; the head '{head['name']}' has {channels}",
            "detection.labels",
        )
    return axis == 0, labels


def _without(profiles: Any, name: str) -> list[Any]:
    kept = []
    for profile in profiles if isinstance(profiles, list) else []:
        shapes = {k: v for k, v in (profile.get("shapes") or {}).items() if k != name}
        if shapes:
            kept.append({**profile, "shapes": shapes})
    return kept
