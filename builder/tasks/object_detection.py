"""Object detection: boxes with scores and labels per image, from a DETR-family checkpoint (read by
the ``ObjectDetection`` task) or from a YOLO-style graph whose entry declares its ``detection:``
block (``dense_entries``), with the metric that verifies either: matched boxes.

A checkpoint's pipeline is ``hf_image_processor`` (its own image processor: ``pixel_values``,
``pixel_mask`` where the model takes one, and each image's ``image_size``), the network (``logits``
and ``pred_boxes`` per query) and ``hf_object_detection``, which reads the queries as the
processor's ``post_process_object_detection`` does. A YOLO-style graph's is ``letterbox``, the
network (one dense head [4 + classes, anchors]) and ``box_decoder`` (Ultralytics' decoding and
suppression, boxes mapped back through the letterbox). Both answer the contract's BOXES, SCORES,
LABELS, CLASSES and COUNT (``clients/detection_contract.py``).

A variant is verified by what its users see: every variant's outputs and the reference's are
decoded as the server decodes them (``python_models/shared/detection.py``), and the reference's
boxes must be matched by the variant's, same label, IoU at least ``iou``, score within
``max_score_diff`` (``match``).
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.python_models.hf_image_processor.contract import IMAGE_SIZE, PIXEL_MASK, PIXEL_VALUES
from builder.python_models.hf_object_detection import contract
from builder.python_models.shared.detection import DenseHead, Found, box_iou, decode_dense, decode_queries
from builder.python_models.shared.processing_contract import CHECKPOINT_CONFIG, IMAGE
from builder.tasks.base import (
    PYTHON_MODELS,
    Checkpoint,
    CoreInputs,
    Entry,
    Samples,
    postprocess_name,
    preprocess_name,
    same,
    tensor,
)
from builder.tasks.image import ImageTask

LOGITS, PRED_BOXES = "logits", "pred_boxes"
# Per precision, where the entry states none: the share of boxes matched (same label, IoU at least
# ``iou``) and the largest score difference of a matched pair.
TOLERANCES: dict[str, Entry] = {
    "fp32": {"detection": {"min_matched": 0.99, "iou": 0.9, "max_score_diff": 0.01}},
    "fp16": {"detection": {"min_matched": 0.95, "iou": 0.8, "max_score_diff": 0.02}},
    "bf16": {"detection": {"min_matched": 0.9, "iou": 0.7, "max_score_diff": 0.05}},
    "int8": {"detection": {"min_matched": 0.9, "iou": 0.5, "max_score_diff": 0.05}},
    "int8_dynamic": {"detection": {"min_matched": 0.9, "iou": 0.5, "max_score_diff": 0.05}},
}
# How each DETR-family image processor reads the queries, as its post_process_object_detection
# does when the pipeline calls it: a softmax with "no object" last, or a sigmoid over every
# (query, class) pair with the best top_k kept (0: as many as there are queries).
QUERY_RULES: dict[str, tuple[str, int | None]] = {
    "DetrImageProcessor": ("softmax", None),  # DETR, Table Transformer
    "YolosImageProcessor": ("softmax", None),
    "ConditionalDetrImageProcessor": ("sigmoid", 100),
    "DeformableDetrImageProcessor": ("sigmoid", 100),  # Deformable DETR, LW-DETR
    "RTDetrImageProcessor": ("sigmoid", 0),  # RT-DETR (v2), D-FINE, DEIMv2
}
PIPELINE_THRESHOLD = 0.5  # transformers' object-detection pipeline's default
MIN_SIDE = 32  # a profile's smallest side for a processor that keeps the aspect ratio


def outputs() -> list[Entry]:
    """The pipeline's answer, per image (its own number of boxes)."""
    return [
        tensor(contract.BOXES, "FP32", [-1, 4]), tensor(contract.SCORES, "FP32", [-1]),
        tensor(contract.LABELS, "STRING", [-1]), tensor(contract.CLASSES, "INT64", [-1]),
        tensor(contract.COUNT, "INT32", [1]),
    ]  # fmt: skip


# -- a DETR-family checkpoint -------------------------------------------------------------------------


class ObjectDetection(ImageTask):
    name = "object-detection"
    auto_class = "AutoModelForObjectDetection"
    mapping = "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES"
    architecture_suffix = "ForObjectDetection"
    tolerances = TOLERANCES

    def refusal(self, ckpt: Checkpoint) -> str | None:
        kind = ckpt.processor.get("image_processor_type")
        if kind not in QUERY_RULES:
            known = ", ".join(QUERY_RULES)
            return f"the image processor {kind} reads its detections in a way not known here (known: {known})"
        return None

    # -- the core model

    def core_inputs(self, ckpt: Checkpoint) -> list[Entry]:
        height, width = _pixel_dims(ckpt)
        pixels = [tensor(PIXEL_VALUES, "FP32", [ckpt.image_dims[0], height, width])]
        return [*pixels, tensor(PIXEL_MASK, "INT64", [height, width])] if _takes_mask(ckpt) else pixels

    def profiles(self, ckpt: Checkpoint) -> list[Entry]:
        if _pixel_dims(ckpt) != (-1, -1):
            return []
        shortest, longest = _edges(ckpt)
        channels = ckpt.image_dims[0]
        side = min(MIN_SIDE, shortest)
        opt = [shortest, min(longest, round(shortest * 4 / 3))]
        shapes = {PIXEL_VALUES: {"min": [channels, side, side], "opt": [channels, *opt],
                                 "max": [channels, longest, longest]}}  # fmt: skip
        if _takes_mask(ckpt):
            shapes[PIXEL_MASK] = {"min": [side, side], "opt": opt, "max": [longest, longest]}
        return [{"shapes": shapes}]

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        scores, _ = QUERY_RULES[ckpt.processor["image_processor_type"]]
        classes = len(ckpt.labels) + (1 if scores == "softmax" else 0)  # softmax: "no object" last
        return [tensor(LOGITS, "FP32", [-1, classes]), tensor(PRED_BOXES, "FP32", [-1, 4])]

    def feed(self, feed: dict[str, Any], accepted: set[str]) -> dict[str, Any]:
        return {k: v for k, v in feed.items() if k in accepted}

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return result.logits, result.pred_boxes

    def core_entry(self, ckpt: Checkpoint, entry: Entry) -> Entry:
        out = super().core_entry(ckpt, entry)
        out.setdefault("detection", query_detection(ckpt))
        return out

    # -- the Python-backend models and the ensemble

    def preprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        made = [*self.core_inputs(ckpt), tensor(IMAGE_SIZE, "INT64", [2])]
        return {
            "name": preprocess_name(name), "path": str(PYTHON_MODELS / "hf_image_processor"),
            "inputs": [tensor(IMAGE, "STRING", [1])], "outputs": made, "files": ckpt.files, **common,
        }  # fmt: skip

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        rule = query_detection(ckpt)
        parameters = {contract.QUERY_SCORES: rule["query_scores"], contract.TOP_K: rule["top_k"],
                      contract.DEFAULT_THRESHOLD: rule["threshold"]}  # fmt: skip
        return {
            "name": postprocess_name(name), "path": str(PYTHON_MODELS / "hf_object_detection"),
            "inputs": [*self.core_outputs(ckpt), tensor(IMAGE_SIZE, "INT64", [2])], "outputs": outputs(),
            "parameters": parameters, "files": [ckpt.file(CHECKPOINT_CONFIG)], **common,
        }  # fmt: skip

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        core_in = [t["name"] for t in self.core_inputs(ckpt)]
        return [
            {"model": name, "inputs": same(core_in), "outputs": same([LOGITS, PRED_BOXES])},
            {"model": postprocess_name(name), "inputs": same([LOGITS, PRED_BOXES, IMAGE_SIZE]),
             "outputs": same(list(contract.OUTPUTS))},
        ]  # fmt: skip

    # -- data

    def read_data(self, path: Path, core: CoreInputs) -> Samples:
        from builder.python_models.hf_image_processor.model import load_processor, processed

        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        made = processed(load_processor(core.folder), [f.read_bytes() for f in files])
        return {name: made[name] for name in core.largest}


def _edges(ckpt: Checkpoint) -> tuple[int, int]:
    size = ckpt.processor.get("size") or {}
    shortest = int(size.get("shortest_edge") or 800)
    return shortest, int(size.get("longest_edge") or max(shortest, 1333))


def _pixel_dims(ckpt: Checkpoint) -> tuple[int, int]:
    """The processor's output height and width: fixed where it resizes or pads to a fixed size,
    else dynamic (its shortest and longest edges keep each image's aspect ratio)."""
    settings = ckpt.processor
    pad = settings.get("pad_size") or {}
    if settings.get("do_pad") and pad.get("height") and pad.get("width"):
        return int(pad["height"]), int(pad["width"])
    size = settings.get("size") or {}
    if size.get("height") and size.get("width"):
        return int(size["height"]), int(size["width"])
    return -1, -1


def _takes_mask(ckpt: Checkpoint) -> bool:
    """A pixel mask goes to the network where the processor pads a request's images to its largest
    (their sizes differ) and the network's forward takes it (DETR does, YOLOS does not)."""
    if not ckpt.processor.get("do_pad") or _pixel_dims(ckpt) != (-1, -1):
        return False
    import transformers
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, ObjectDetection.mapping)
    model_class = getattr(transformers, str(names.get(ckpt.config.get("model_type"), "")), None)
    return model_class is not None and PIXEL_MASK in inspect.signature(model_class.forward).parameters


def query_detection(ckpt: Checkpoint) -> Entry:
    """The entry's ``detection`` block of a DETR-family checkpoint: how its queries are read."""
    scores, top_k = QUERY_RULES[ckpt.processor["image_processor_type"]]
    if top_k == 0:
        top_k = int(ckpt.config.get("num_queries") or 0)
    return {"format": "detr", "query_scores": scores, "top_k": top_k or 0, "threshold": PIPELINE_THRESHOLD}


# -- a YOLO-style graph -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseGraph:
    """What a YOLO-style entry composes from: its graph's image input and head, as the spec read
    them, and its ``detection`` block's values (plain, the spec checked them)."""

    name: str
    batch: int
    image: Entry  # the graph's image input: name, dtype, dims ([3, H, W] or [H, W, 3])
    head: Entry  # the graph's head output: name, dtype, dims
    channels_first: bool  # the head is [4 + classes, anchors]
    labels: list[str]
    letterbox: tuple[int, int]  # height, width
    parameters: dict[str, str | int | float | bool]  # letterbox's and box_decoder's, by the contract


def dense_entries(graph: DenseGraph) -> tuple[list[Entry], Entry]:
    """``<name>_preprocess`` (letterbox), ``<name>_postprocess`` (box_decoder) and the ensemble
    ``<name>_pipeline``."""
    common: Entry = {"max_batch_size": graph.batch, "batching": {"enabled": True}}
    image, head, size = graph.image["name"], graph.head["name"], tensor(IMAGE_SIZE, "INT64", [2])
    layout = "NCHW" if graph.image["dims"][0] == 3 else "NHWC"
    pre_params = {k: v for k, v in graph.parameters.items() if k in LETTERBOX_KEYS}
    post_params = {k: v for k, v in graph.parameters.items() if k in DECODER_KEYS}
    pre = {
        "name": preprocess_name(graph.name), "path": str(PYTHON_MODELS / "letterbox"),
        "inputs": [tensor(IMAGE, "STRING", [1])], "outputs": [dict(graph.image), size],
        "parameters": {**pre_params, contract.LAYOUT: layout,
                       contract.DTYPE: DTYPES.get(graph.image["dtype"], "float32")}, **common,
    }  # fmt: skip
    head_layout = "channels_first" if graph.channels_first else "anchors_first"
    post = {
        "name": postprocess_name(graph.name), "path": str(PYTHON_MODELS / "box_decoder"),
        "inputs": [dict(graph.head), size], "outputs": outputs(),
        "parameters": {**post_params, contract.HEAD_LAYOUT: head_layout,
                       contract.CLASS_NAMES: json.dumps(graph.labels)}, **common,
    }  # fmt: skip
    steps = [
        {"model": pre["name"], "inputs": same([IMAGE]), "outputs": same([image, IMAGE_SIZE])},
        {"model": graph.name, "inputs": same([image]), "outputs": same([head])},
        {"model": post["name"], "inputs": same([head, IMAGE_SIZE]), "outputs": same(list(contract.OUTPUTS))},
    ]
    ensemble = {"name": f"{graph.name}_pipeline", "max_batch_size": graph.batch,
                "inputs": [tensor(IMAGE, "STRING", [1])], "outputs": outputs(), "steps": steps}  # fmt: skip
    return [pre, post], ensemble


DTYPES = {"FP32": "float32", "FP16": "float16", "UINT8": "uint8"}  # a graph's image input, as numpy's
LETTERBOX_KEYS = {
    contract.LETTERBOX_SIZE,
    contract.PAD_VALUE,
    contract.RESAMPLE,
    contract.SCALE,
    contract.CHANNELS,
}
DECODER_KEYS = {
    contract.LETTERBOX_SIZE, contract.BOX_FORMAT, contract.CLASS_SCORES, contract.DEFAULT_THRESHOLD,
    contract.IOU_THRESHOLD, contract.CLASS_AGNOSTIC, contract.MAX_DETECTIONS,
}  # fmt: skip


def letterboxed_images(files: list[Path], recipe: dict[str, str]) -> NDArray[Any]:
    """Calibration or evaluation images as a YOLO-style graph takes them (``letterbox``'s own code,
    with the config parameters it is served with)."""
    from builder.python_models.letterbox.model import Recipe, prepared

    pixels, _ = prepared(Recipe.from_parameters(recipe), [f.read_bytes() for f in files])
    return pixels


# -- verification ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decoding:
    """How the server decodes a detector's core outputs (from the entry's ``detection`` block)."""

    format: str  # "detr": logits and pred_boxes per query; "yolo": one dense head
    threshold: float
    query_scores: str = "softmax"
    top_k: int = 0
    head: str = ""  # yolo: the head output's name
    dense: DenseHead | None = None

    def decode(self, outputs: dict[str, NDArray[Any]], threshold: float) -> list[Found]:
        """Each sample's detections (boxes in the network's own coordinates: relative for DETR,
        the input's pixels for a dense head; IoU is the same either way)."""
        if self.format == "detr":
            return decode_queries(outputs[LOGITS], outputs[PRED_BOXES], scores=self.query_scores,
                                  top_k=self.top_k, threshold=threshold)  # fmt: skip
        assert self.dense is not None
        return decode_dense(outputs[self.head], self.dense, threshold)

    @property
    def outputs(self) -> list[str]:
        return [LOGITS, PRED_BOXES] if self.format == "detr" else [self.head]


@dataclass(frozen=True)
class BoxTolerance:
    min_matched: float
    iou: float
    max_score_diff: float


@dataclass(frozen=True)
class Matched:
    """How a variant's boxes meet the reference's: the share matched (the lower of the reference's
    boxes found and the variant's boxes that are the reference's), the worst score difference of a
    matched pair, the smallest IoU of one, and the reference's box count."""

    matched: float
    score_diff: float
    iou: float
    boxes: int


def match(reference: list[Found], candidate: list[Found], threshold: float, tol: BoxTolerance) -> Matched:
    """Pair boxes per sample: each of the reference's boxes above ``threshold``, best first, with
    the variant's box of the same label that overlaps it most (IoU at least ``tol.iou``); a box
    just below the threshold on one side may pair with one just above it on the other (within
    ``tol.max_score_diff``), so a score that crosses the threshold by rounding is no miss."""
    low = threshold - tol.max_score_diff
    ref_total = cand_total = ref_found = cand_found = 0
    worst_diff, worst_iou = 0.0, 1.0
    for ref, cand in zip(reference, candidate, strict=True):
        ref, cand = ref.above(low), cand.above(low)
        pairs = _pairs(ref, cand, tol.iou)
        ref_counted, cand_counted = ref.scores > threshold, cand.scores > threshold
        ref_total += int(ref_counted.sum())
        cand_total += int(cand_counted.sum())
        for r, c, overlap in pairs:
            ref_found += int(ref_counted[r])
            cand_found += int(cand_counted[c])
            if ref_counted[r] or cand_counted[c]:
                worst_diff = max(worst_diff, abs(float(ref.scores[r]) - float(cand.scores[c])))
                worst_iou = min(worst_iou, overlap)
    share = min(ref_found / ref_total if ref_total else 1.0, cand_found / cand_total if cand_total else 1.0)
    return Matched(share, worst_diff, worst_iou, ref_total)


def _pairs(ref: Found, cand: Found, bound: float) -> list[tuple[int, int, float]]:
    if not len(ref) or not len(cand):
        return []
    overlaps = box_iou(ref.boxes, cand.boxes)
    overlaps[ref.classes[:, None] != cand.classes[None, :]] = -1.0
    taken = np.zeros(len(cand), dtype=bool)
    pairs = []
    for r in np.argsort(-ref.scores, kind="stable"):
        row = np.where(taken, -1.0, overlaps[r])
        c = int(np.argmax(row))
        if row[c] >= bound and math.isfinite(row[c]):
            taken[c] = True
            pairs.append((int(r), c, float(row[c])))
    return pairs


def verify_boxes(
    reference: dict[str, NDArray[Any]],
    candidate: dict[str, NDArray[Any]],
    decoding: Decoding,
    tol: BoxTolerance,
) -> tuple[Matched, list[str]]:
    """The variant's boxes against the reference's, both decoded as served; failures in one line each."""
    low = max(decoding.threshold - tol.max_score_diff, 0.0)
    missing = [n for n in decoding.outputs if n not in reference or n not in candidate]
    if missing:
        return Matched(0.0, math.inf, 0.0, 0), [f"detections: no output {missing} to decode"]
    found = match(decoding.decode(reference, low), decoding.decode(candidate, low), decoding.threshold, tol)
    failures = []
    if not found.matched >= tol.min_matched:
        failures.append(
            f"detections matched {found.matched:.3f} < {tol.min_matched} allowed "
            f"(of {found.boxes} boxes; same label, IoU >= {tol.iou})"
        )
    if not found.score_diff <= tol.max_score_diff:
        failures.append(f"detections score diff {found.score_diff:.4g} > {tol.max_score_diff} allowed")
    return found, failures
