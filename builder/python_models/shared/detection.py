"""Object detection in numpy: a detector's raw outputs to boxes, scores and classes, and the
letterbox that prepares a YOLO-style graph's input. The detectors' Python-backend models link to
this one file; the builder's verification decodes every variant with it, so the boxes it checks
are the boxes the server answers. It imports nothing of the project.

Two kinds of head:

* a DETR-family checkpoint's queries (``logits`` [Q, classes (+1)], ``pred_boxes`` [Q, 4] as
  centre x, y, width, height relative to the image), read as its transformers image processor's
  ``post_process_object_detection`` reads them: a softmax whose last class is "no object" (DETR,
  YOLOS) or a sigmoid over every (query, class) pair with the best ``top_k`` kept (RT-DETR,
  Conditional and Deformable DETR), then the pairs above the threshold;
* a YOLO-style dense head ([4 + classes, anchors]: a box in the input's pixels and each class's
  score per anchor), read by Ultralytics' published rules: the best class per anchor above the
  threshold, at most ``MAX_NMS`` candidates, greedy non-maximum suppression per class (or across
  classes), at most ``max_detections`` kept, best first; boxes mapped back through the letterbox to
  the original image and clipped to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

MAX_NMS = 30000  # candidates handed to the suppression, best first (Ultralytics' max_nms)
BOX_FORMATS = ("cxcywh", "xyxy", "xywh")
QUERY_SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class Found:
    """One image's detections: ``boxes`` [K, 4] (xmin, ymin, xmax, ymax), ``scores`` [K],
    ``classes`` [K] (int64)."""

    boxes: NDArray[np.float32]
    scores: NDArray[np.float32]
    classes: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def above(self, threshold: float) -> Found:
        keep = self.scores > threshold
        return Found(self.boxes[keep], self.scores[keep], self.classes[keep])


def sigmoid(x: NDArray[Any]) -> NDArray[np.float32]:
    x = np.asarray(x, dtype=np.float32)
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=np.float32)


def softmax(x: NDArray[Any]) -> NDArray[np.float32]:
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True), dtype=np.float32)


def corners(boxes: NDArray[Any], box_format: str) -> NDArray[np.float32]:
    """[..., 4] boxes in ``box_format`` as xmin, ymin, xmax, ymax."""
    b = np.asarray(boxes, dtype=np.float32)
    if box_format == "xyxy":
        return b.copy()
    if box_format == "cxcywh":
        half = b[..., 2:4] / 2
        return np.concatenate([b[..., 0:2] - half, b[..., 0:2] + half], axis=-1)
    if box_format == "xywh":
        return np.concatenate([b[..., 0:2], b[..., 0:2] + b[..., 2:4]], axis=-1)
    raise ValueError(f"box format {box_format!r} is not one of {', '.join(BOX_FORMATS)}")


# -- a DETR-family checkpoint's queries -------------------------------------------------------------


def decode_queries(
    logits: NDArray[Any], boxes: NDArray[Any], *, scores: str, top_k: int, threshold: float
) -> list[Found]:
    """Per image of ``logits`` [B, Q, C] and ``boxes`` [B, Q, 4] (relative cxcywh): its detections
    above ``threshold``, boxes relative to the image (scale them with ``scaled``), in the order the
    image processor gives them (query order for softmax, best first for sigmoid)."""
    logits = np.asarray(logits, dtype=np.float32)
    xyxy = corners(boxes, "cxcywh")
    if scores == "softmax":
        prob = softmax(logits)[..., :-1]
        best, classes = prob.max(axis=-1), prob.argmax(axis=-1)
        return [
            Found(xyxy[i], best[i], classes[i].astype(np.int64)).above(threshold) for i in range(len(logits))
        ]
    if scores != "sigmoid":
        raise ValueError(f"query scores {scores!r} are not one of {', '.join(QUERY_SCORES)}")
    count = logits.shape[-1]
    flat = sigmoid(logits).reshape(len(logits), -1)
    k = min(top_k, flat.shape[1]) if top_k > 0 else flat.shape[1]
    found = []
    for i in range(len(logits)):
        order = np.argsort(-flat[i], kind="stable")[:k]
        picked = Found(xyxy[i][order // count], flat[i][order], (order % count).astype(np.int64))
        found.append(picked.above(threshold))
    return found


def scaled(found: Found, height: int, width: int) -> Found:
    """Relative boxes in an image's pixels."""
    factor = np.array([width, height, width, height], dtype=np.float32)
    return Found((found.boxes * factor).astype(np.float32), found.scores, found.classes)


# -- a YOLO-style dense head ------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseHead:
    """How a dense head is read and suppressed (the spec's ``detection`` block)."""

    box_format: str = "cxcywh"
    class_scores: str = "probabilities"  # or "logits": a sigmoid is applied
    channels_first: bool = True  # [4 + classes, anchors]; False: [anchors, 4 + classes]
    threshold: float = 0.25
    iou_threshold: float = 0.45
    class_agnostic: bool = False
    max_detections: int = 300


def decode_dense(head: NDArray[Any], rules: DenseHead, threshold: float | None = None) -> list[Found]:
    """Per image of ``head`` [B, 4 + C, A] (or [B, A, 4 + C]): its boxes after suppression, in the
    graph input's pixels, best first."""
    columns = np.asarray(head, dtype=np.float32)
    if columns.ndim != 3:
        raise ValueError(f"a dense head has 3 axes with the batch, got shape {list(columns.shape)}")
    if columns.shape[1 if rules.channels_first else -1] < 5:
        raise ValueError(f"a dense head needs 4 box values and at least one class, got {list(columns.shape)}")
    if not rules.channels_first:
        columns = columns.transpose(0, 2, 1)  # a view: [B, 4 + C, A] either way
    limit = rules.threshold if threshold is None else threshold
    return [_one_image(c, rules, limit) for c in columns]


def _one_image(columns: NDArray[np.float32], rules: DenseHead, threshold: float) -> Found:
    """One image's [4 + C, A] head: the best class of each anchor above the threshold, suppressed."""
    scores = columns[4:]
    best = scores.max(axis=0)
    if rules.class_scores == "logits":
        best = sigmoid(best)  # monotonic: the best logit's class is the best probability's
    keep = np.flatnonzero(best > threshold)
    if keep.size > MAX_NMS:
        keep = keep[np.argsort(-best[keep], kind="stable")[:MAX_NMS]]
    boxes = corners(columns[:4, keep].T, rules.box_format)
    best, classes = best[keep], scores[:, keep].argmax(axis=0).astype(np.int64)
    groups = np.zeros_like(classes) if rules.class_agnostic else classes
    kept = nms(boxes, best, groups, rules.iou_threshold, rules.max_detections)
    return Found(boxes[kept], best[kept], classes[kept])


def nms(
    boxes: NDArray[Any], scores: NDArray[Any], groups: NDArray[Any], iou_threshold: float, limit: int
) -> NDArray[np.int64]:
    """Greedy non-maximum suppression within each group (a class, or one group for all): the
    indices of at most ``limit`` boxes kept, best first; a box is dropped when it overlaps a better
    kept one of its group by more than ``iou_threshold`` (torchvision's rule, as Ultralytics applies
    it per class). ONNX Runtime's NonMaxSuppression does the work (C++, milliseconds faster than
    numpy's loop on a crowded photo)."""
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    if not scores.size:
        return np.zeros(0, dtype=np.int64)
    present, slot = np.unique(np.asarray(groups).reshape(-1), return_inverse=True)
    per_group = np.full((1, present.size, scores.size), -np.inf, dtype=np.float32)  # -inf: not its group
    per_group[0, slot, np.arange(scores.size)] = scores
    lowest = np.float32(scores.min()) - np.float32(1.0)  # every box a candidate in its own group
    feed = {
        "boxes": boxes[None], "scores": per_group, "limit": np.array([limit], dtype=np.int64),
        "iou": np.array([iou_threshold], dtype=np.float32), "floor": np.array([lowest], dtype=np.float32),
    }  # fmt: skip
    (selected,) = _nms_session().run(None, feed)
    chosen = selected[:, 2][per_group[0, selected[:, 1], selected[:, 2]] > lowest]
    chosen = chosen[np.lexsort((chosen, -scores[chosen]))]  # best first, ties by index
    return np.asarray(chosen[:limit], dtype=np.int64)


_SESSION: list[Any] = []


def ready() -> None:
    """Build the suppression's session now (a served model's start) rather than on its first request."""
    _nms_session()


def _nms_session() -> Any:
    """One ONNX Runtime session of a graph that is one NonMaxSuppression node (built once)."""
    if not _SESSION:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        def value(name: str, kind: int, dims: list[Any]) -> Any:
            return helper.make_tensor_value_info(name, kind, dims)

        node = helper.make_node(
            "NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["selected"]
        )
        inputs = [
            value("boxes", TensorProto.FLOAT, [1, "n", 4]), value("scores", TensorProto.FLOAT, [1, "c", "n"]),
            value("limit", TensorProto.INT64, [1]), value("iou", TensorProto.FLOAT, [1]),
            value("floor", TensorProto.FLOAT, [1]),
        ]  # fmt: skip
        graph = helper.make_graph([node], "nms", inputs, [value("selected", TensorProto.INT64, ["k", 3])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        _SESSION.append(
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        )
    return _SESSION[0]


def box_iou(a: NDArray[Any], b: NDArray[Any]) -> NDArray[np.float64]:
    """[len(a), len(b)] intersection over union of xyxy boxes; boxes without area (clipped to an
    image's edge) overlap only the same box (1)."""
    a, b = np.asarray(a, dtype=np.float64).reshape(-1, 4), np.asarray(b, dtype=np.float64).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    same = (a[:, None, :] == b[None, :, :]).all(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, np.where(same, 1.0, 0.0))


# -- the letterbox ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Letterbox:
    """Where an image of ``height`` x ``width`` lands in the graph's input of ``size`` (height,
    width): resized by ``gain`` (aspect kept) to ``resized`` (width, height), its top-left corner at
    (``left``, ``top``), the rest padded (Ultralytics' LetterBox, centred, scaled up too)."""

    height: int
    width: int
    size: tuple[int, int]
    gain: float
    resized: tuple[int, int]
    left: int
    top: int

    @classmethod
    def fit(cls, height: int, width: int, size: tuple[int, int]) -> Letterbox:
        if height <= 0 or width <= 0:
            raise ValueError(f"an image of {width} x {height} pixels has nothing to detect in")
        gain = min(size[0] / height, size[1] / width)
        resized = (round(width * gain), round(height * gain))
        left = round((size[1] - resized[0]) / 2 - 0.1)
        top = round((size[0] - resized[1]) / 2 - 0.1)
        return cls(height, width, (size[0], size[1]), gain, resized, left, top)

    def to_image(self, found: Found) -> Found:
        """Boxes in the graph input's pixels as boxes in the original image's, clipped to it
        (Ultralytics' scale_boxes: its padding from the unrounded resized size)."""
        left = round((self.size[1] - self.width * self.gain) / 2 - 0.1)
        top = round((self.size[0] - self.height * self.gain) / 2 - 0.1)
        boxes = found.boxes.astype(np.float32).copy()
        boxes[:, [0, 2]] -= left
        boxes[:, [1, 3]] -= top
        boxes /= np.float32(self.gain)
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, self.width)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, self.height)
        return Found(boxes, found.scores, found.classes)


RESAMPLING = ("bilinear", "nearest", "bicubic")


def letterboxed(
    picture: Any, size: tuple[int, int], *, pad: int = 114, resample: str = "bilinear"
) -> tuple[NDArray[np.uint8], Letterbox]:
    """An upright RGB ``PIL.Image`` as the [height, width, 3] uint8 canvas of ``size``, and where
    it landed."""
    from PIL import Image

    box = Letterbox.fit(picture.height, picture.width, size)
    if box.resized != (picture.width, picture.height):
        filters = {"bilinear": Image.BILINEAR, "nearest": Image.NEAREST, "bicubic": Image.BICUBIC}
        picture = picture.resize(box.resized, filters[resample])
    canvas = Image.new("RGB", (size[1], size[0]), (pad, pad, pad))
    canvas.paste(picture, (box.left, box.top))
    return np.asarray(canvas, dtype=np.uint8), box


def upright(data: bytes) -> Any:
    """Encoded image bytes as an upright RGB ``PIL.Image`` (EXIF orientation applied, as
    transformers' ``load_image`` does; alpha dropped, grey expanded)."""
    import io

    from PIL import Image, ImageOps

    if not data:
        raise ValueError("the image is empty (0 bytes)")
    picture = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if picture.width == 0 or picture.height == 0:
        raise ValueError("the image has no pixels")
    return picture.convert("RGB")


# -- the answer -------------------------------------------------------------------------------------


def requested_threshold(parameters: str | None, name: str, default: float) -> float:
    """The score threshold a request's parameters (Triton's JSON of them) set under ``name``, else
    ``default``; ValueError naming the parameter for anything but a number from 0 to 1."""
    import json

    given = json.loads(parameters or "{}").get(name)
    if given is None:
        return default
    try:
        if isinstance(given, bool):
            raise TypeError(given)
        value = float(given)
    except (TypeError, ValueError):
        raise ValueError(
            f"request parameter {name!r}: expected a number from 0 to 1, got {given!r}"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"request parameter {name!r}: expected a number from 0 to 1, got {given!r}")
    return value


def packed(found: list[Found], names: list[str]) -> dict[str, NDArray[Any]]:
    """The images' detections as one response's arrays: each padded to the largest count (zeros
    and ""), with each image's count: boxes [B, K, 4], scores [B, K], labels [B, K] (UTF-8
    bytes), classes [B, K], count [B, 1]."""
    most = max((len(f) for f in found), default=0)
    boxes = np.zeros((len(found), most, 4), dtype=np.float32)
    scores = np.zeros((len(found), most), dtype=np.float32)
    classes = np.zeros((len(found), most), dtype=np.int64)
    labels = np.full((len(found), most), b"", dtype=object)
    for i, f in enumerate(found):
        n = len(f)
        boxes[i, :n], scores[i, :n], classes[i, :n] = f.boxes, f.scores, f.classes
        labels[i, :n] = [label(names, int(c)).encode("utf-8") for c in f.classes]
    count = np.array([[len(f)] for f in found], dtype=np.int32).reshape(len(found), 1)
    return {"boxes": boxes, "scores": scores, "labels": labels, "classes": classes, "count": count}


def label(names: list[str], index: int) -> str:
    return names[index] if 0 <= index < len(names) else f"LABEL_{index}"
