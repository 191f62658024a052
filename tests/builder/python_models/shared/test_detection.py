"""The detectors' shared numpy: queries read as transformers' image processors read them, a dense
head decoded and suppressed by the published rules (checked against plain loops written here),
the letterbox's geometry and its inverse, the ragged answer and the request's threshold."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from builder.python_models.shared.detection import (
    DenseHead,
    Found,
    Letterbox,
    box_iou,
    corners,
    decode_dense,
    decode_queries,
    letterboxed,
    nms,
    packed,
    requested_threshold,
    scaled,
)

RNG = np.random.default_rng(0)


def _outputs(classes: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    logits = RNG.normal(0, 2, (2, 12, classes)).astype(np.float32)
    boxes = RNG.uniform(0.1, 0.9, (2, 12, 4)).astype(np.float32)
    return logits, boxes


@pytest.mark.parametrize(
    ("processor", "scores", "top_k", "extra"),
    [
        ("transformers.models.detr.image_processing_pil_detr:DetrImageProcessorPil", "softmax", 0, {}),
        (
            "transformers.models.rt_detr.image_processing_pil_rt_detr:RTDetrImageProcessorPil",
            "sigmoid", 12, {},
        ),
        (
            "transformers.models.deformable_detr.image_processing_pil_deformable_detr:"
            "DeformableDetrImageProcessorPil", "sigmoid", 100, {},
        ),
    ],
)  # fmt: skip
def test_queries_are_read_as_the_image_processor_reads_them(
    processor: str, scores: str, top_k: int, extra: dict[str, Any]
) -> None:
    import importlib

    import torch

    module, _, name = processor.partition(":")
    proc = getattr(importlib.import_module(module), name)()
    logits, boxes = _outputs(4 if scores == "softmax" else 3)
    sizes = [(427, 640), (300, 200)]
    outputs = SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes))
    expected = proc.post_process_object_detection(outputs, threshold=0.3, target_sizes=sizes, **extra)
    found = decode_queries(logits, boxes, scores=scores, top_k=top_k, threshold=0.3)
    for got, want, (h, w) in zip(found, expected, sizes, strict=True):
        got = scaled(got, h, w)
        assert len(got) == len(want["scores"]) > 0
        np.testing.assert_allclose(got.scores, want["scores"].numpy(), atol=1e-6)
        np.testing.assert_array_equal(got.classes, want["labels"].numpy())
        np.testing.assert_allclose(got.boxes, want["boxes"].numpy(), atol=1e-3)


def test_boxes_without_area_overlap_only_themselves() -> None:
    line = np.array([[640, 0, 640, 427]], dtype=np.float32)  # a box clipped to the image's edge
    assert box_iou(line, line)[0, 0] == 1.0 and box_iou(line, line + 1)[0, 0] == 0.0
    assert box_iou([[0, 0, 10, 10]], [[5, 0, 15, 10]])[0, 0] == pytest.approx(1 / 3)


def test_box_formats_become_corners() -> None:
    box = np.array([[10.0, 20.0, 4.0, 6.0]])
    np.testing.assert_array_equal(corners(box, "cxcywh"), [[8, 17, 12, 23]])
    np.testing.assert_array_equal(corners(box, "xywh"), [[10, 20, 14, 26]])
    np.testing.assert_array_equal(corners(box, "xyxy"), box)
    with pytest.raises(ValueError, match="box format 'yxyx'"):
        corners(box, "yxyx")


def _iou(a: list[float], b: list[float]) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _loop_nms(boxes: np.ndarray[Any, Any], scores: np.ndarray[Any, Any], bound: float) -> list[int]:
    """Greedy suppression written out: best first, drop what overlaps a kept box by more than bound."""
    rows = boxes.tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    kept: list[int] = []
    for i in order:
        if all(_iou(rows[i], rows[k]) <= bound for k in kept):
            kept.append(i)
    return kept


def test_suppression_keeps_what_the_greedy_rule_keeps_per_class_best_first() -> None:
    centres = RNG.uniform(0, 100, (300, 2))
    sizes = RNG.uniform(5, 40, (300, 2))
    boxes = np.concatenate([centres, centres + sizes], axis=1).astype(np.float32)
    scores = RNG.uniform(0, 1, 300).astype(np.float32)
    classes = RNG.integers(0, 3, 300)
    for bound in (0.3, 0.5, 0.7):
        alone = nms(boxes, scores, np.zeros(300, np.int64), bound, 1000).tolist()
        assert alone == _loop_nms(boxes, scores, bound)
        per_class = nms(boxes, scores, classes, bound, 1000)
        apart = boxes + classes[:, None].astype(np.float32) * 7680  # Ultralytics' offsets
        assert per_class.tolist() == _loop_nms(apart, scores, bound)
        assert nms(boxes, scores, classes, bound, 5).tolist() == per_class[:5].tolist()
    assert nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0), 0.5, 10).tolist() == []


def test_a_dense_head_is_thresholded_suppressed_per_class_and_capped() -> None:
    # anchors: two overlapping boxes of class 0, one of class 1 on top of them, one below threshold
    rows = np.array([
        [50, 50, 20, 20, 0.9, 0.1], [51, 50, 20, 20, 0.8, 0.1], [50, 51, 20, 20, 0.1, 0.7],
        [10, 10, 4, 4, 0.2, 0.1],
    ], dtype=np.float32)  # fmt: skip
    head = rows.T[None]  # [1, 4 + 2, anchors]
    (found,) = decode_dense(head, DenseHead(threshold=0.25))
    assert found.classes.tolist() == [0, 1] and found.scores.tolist() == pytest.approx([0.9, 0.7])
    np.testing.assert_allclose(found.boxes[0], [40, 40, 60, 60])
    (agnostic,) = decode_dense(head, DenseHead(threshold=0.25, class_agnostic=True))
    assert agnostic.classes.tolist() == [0]
    (capped,) = decode_dense(head, DenseHead(threshold=0.05, max_detections=1))
    assert len(capped) == 1
    (transposed,) = decode_dense(rows[None], DenseHead(threshold=0.25, channels_first=False))
    np.testing.assert_array_equal(transposed.boxes, found.boxes)
    (logits,) = decode_dense(head, DenseHead(threshold=0.6, class_scores="logits"))
    assert logits.classes.tolist() == [0, 1]  # sigmoid: 0.71 and 0.67 (0.69 of class 0 suppressed)
    assert logits.scores.tolist() == pytest.approx([1 / (1 + np.exp(-0.9)), 1 / (1 + np.exp(-0.7))])
    with pytest.raises(ValueError, match="3 axes"):
        decode_dense(rows, DenseHead())


@pytest.mark.parametrize(
    ("height", "width", "resized", "left", "top"),
    [
        (427, 640, (96, 64), 0, 16),
        (640, 427, (64, 96), 16, 0),
        (256, 256, (96, 96), 0, 0),
        (10, 33, (96, 29), 0, 33),
    ],
)
def test_the_letterbox_fits_centres_and_maps_back(
    height: int, width: int, resized: tuple[int, int], left: int, top: int
) -> None:
    box = Letterbox.fit(height, width, (96, 96))
    assert (box.resized, box.left, box.top) == (resized, left, top)
    # a box on the image, as the network would see it, maps back where it was (within a pixel)
    on_image = np.array([[width * 0.25, height * 0.25, width * 0.75, height * 0.5]], dtype=np.float32)
    seen = on_image * box.gain + np.array([left, top, left, top], dtype=np.float32)
    back = box.to_image(Found(seen, np.ones(1, np.float32), np.zeros(1, np.int64)))
    np.testing.assert_allclose(back.boxes, on_image, atol=1.0)
    outside = Found(
        np.array([[-50, -50, 500, 500]], np.float32), np.ones(1, np.float32), np.zeros(1, np.int64)
    )
    np.testing.assert_array_equal(box.to_image(outside).boxes, [[0, 0, width, height]])


def test_the_canvas_is_padded_grey_around_the_resized_photo() -> None:
    from PIL import Image

    canvas, box = letterboxed(Image.new("RGB", (640, 427), (255, 0, 0)), (96, 96), pad=114)
    assert canvas.shape == (96, 96, 3) and canvas.dtype == np.uint8
    assert (canvas[: box.top] == 114).all() and (canvas[box.top + box.resized[1] :] == 114).all()
    assert (canvas[box.top + 5, 10] == [255, 0, 0]).all()
    with pytest.raises(ValueError, match="nothing to detect"):
        Letterbox.fit(0, 10, (96, 96))


def test_the_answer_is_ragged_per_image_padded_within_a_request() -> None:
    one = Found(np.ones((2, 4), np.float32), np.array([0.9, 0.8], np.float32), np.array([1, 7]))
    none = Found(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))
    arrays = packed([one, none], ["a", "b"])
    assert arrays["boxes"].shape == (2, 2, 4) and arrays["count"].tolist() == [[2], [0]]
    assert arrays["labels"].tolist() == [[b"b", b"LABEL_7"], [b"", b""]]
    alone = packed([none], ["a"])
    assert alone["boxes"].shape == (1, 0, 4) and alone["labels"].shape == (1, 0)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (None, 0.5),
        ("{}", 0.5),
        ('{"threshold": 0.3}', 0.3),
        ('{"threshold": "0.7"}', 0.7),
        ('{"threshold": 1}', 1.0),
    ],
)
def test_a_request_may_set_its_threshold(parameters: str | None, expected: float) -> None:
    assert requested_threshold(parameters, "threshold", 0.5) == pytest.approx(expected)


@pytest.mark.parametrize("value", ['"high"', "1.5", "-0.1", "true"])
def test_a_bad_threshold_is_one_line_naming_the_parameter(value: str) -> None:
    with pytest.raises(ValueError, match="request parameter 'threshold': expected a number from 0 to 1"):
        requested_threshold(f'{{"threshold": {value}}}', "threshold", 0.5)
