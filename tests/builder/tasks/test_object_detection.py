"""Object detection: a DETR-family checkpoint's entries composed from its image processor's
settings (dynamic sizes and a pixel mask where it keeps the aspect ratio, fixed ones where it
resizes to a size; its way of reading the queries), and the metric that verifies a detector:
boxes matched by label and IoU, a score crossing the threshold by rounding no miss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.python_models.shared.detection import DenseHead, Found
from builder.records import OutputMetrics
from builder.spec import TensorSpec, Tolerance
from builder.stages.verify import DETECTIONS, compare
from builder.tasks import task
from builder.tasks.base import Checkpoint
from builder.tasks.object_detection import BoxTolerance, Decoding, match, verify_boxes
from tests.builder.tasks.checkpoints import PROCESSOR, composed

LABELS = {0: "cat", 1: "dog", 2: "cup"}
DETR = {"image_processor_type": "DetrImageProcessor", "size": {"shortest_edge": 64, "longest_edge": 96},
        "do_pad": True}  # fmt: skip


def detector(processor: dict[str, Any], model_type: str = "detr") -> Checkpoint:
    return Checkpoint(
        Path("ckpt"), "ckpt", task("object-detection"), ["pixel_values"], 16, dict(LABELS), 0, [3, 224, 224],
        list(PROCESSOR), config={"model_type": model_type, "num_queries": 300}, processor=processor,
    )  # fmt: skip


def test_a_detr_keeping_the_aspect_ratio_takes_any_size_with_a_pixel_mask() -> None:
    spec = composed(detector(DETR), name="detr")
    core = spec.model("detr")
    assert [(t.name, t.dtype.value, t.dims) for t in core.inputs] == [
        ("pixel_values", "FP32", [3, -1, -1]), ("pixel_mask", "INT64", [-1, -1]),
    ]  # fmt: skip
    shapes = core.profiles[0].shapes
    assert (shapes["pixel_values"].min, shapes["pixel_values"].opt, shapes["pixel_values"].max) == (
        [3, 32, 32], [3, 64, 85], [3, 96, 96],
    )  # fmt: skip
    assert shapes["pixel_mask"].max == [96, 96]
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [-1, 4]), ("pred_boxes", [-1, 4])]
    assert core.detection is not None and core.detection.format == "detr"
    assert (core.detection.query_scores, core.detection.default_threshold) == ("softmax", 0.5)
    assert core.tolerances[core.precisions[0]].detection is not None
    pre, post = spec.python_models
    assert Path(pre.path).name == "hf_image_processor"
    assert [t.name for t in pre.outputs] == ["pixel_values", "pixel_mask", "image_size"]
    assert Path(post.path).name == "hf_object_detection"
    assert post.parameters == {"query_scores": "softmax", "top_k": 0, "threshold": 0.5}
    assert post.files == ["ckpt/config.json"]
    (pipeline,) = spec.ensembles
    assert [(s.model, sorted(s.inputs)) for s in pipeline.steps] == [
        ("detr_preprocess", ["IMAGE"]), ("detr", ["pixel_mask", "pixel_values"]),
        ("detr_postprocess", ["image_size", "logits", "pred_boxes"]),
    ]  # fmt: skip
    assert [(t.name, t.dims) for t in pipeline.outputs] == [
        ("BOXES", [-1, 4]), ("SCORES", [-1]), ("LABELS", [-1]), ("CLASSES", [-1]), ("COUNT", [1]),
    ]  # fmt: skip


def test_an_rt_detr_resizing_to_a_size_takes_that_size_and_reads_its_best_queries() -> None:
    rt = {
        "image_processor_type": "RTDetrImageProcessor",
        "size": {"height": 640, "width": 640},
        "do_pad": False,
    }
    spec = composed(detector(rt, "rt_detr"), name="rt")
    core = spec.model("rt")
    assert [(t.name, t.dims) for t in core.inputs] == [("pixel_values", [3, 640, 640])] and not core.profiles
    assert next((t.name, t.dims) for t in core.outputs) == ("logits", [-1, 3])  # no "no object" class
    assert core.detection is not None and (core.detection.query_scores, core.detection.top_k) == (
        "sigmoid",
        300,
    )


def test_yolos_pads_without_a_mask_its_forward_does_not_take() -> None:
    yolos = {**DETR, "image_processor_type": "YolosImageProcessor"}
    core = composed(detector(yolos, "yolos"), name="y").model("y")
    assert [t.name for t in core.inputs] == ["pixel_values"] and list(core.profiles[0].shapes) == [
        "pixel_values"
    ]


def test_a_processor_whose_reading_is_unknown_is_refused_naming_it() -> None:
    refused = task("object-detection").refusal(
        detector({"image_processor_type": "PPDocLayoutV2ImageProcessor"})
    )
    assert refused is not None and refused.startswith("the image processor PPDocLayoutV2ImageProcessor")
    assert task("object-detection").refusal(detector(DETR)) is None


# -- the metric ----------------------------------------------------------------------------------------

TOL = BoxTolerance(min_matched=0.95, iou=0.5, max_score_diff=0.05)


def found(*rows: tuple[float, float, float, float, float, int]) -> Found:
    array = np.array(rows, dtype=np.float32).reshape(-1, 6)
    return Found(array[:, :4], array[:, 4], array[:, 5].astype(np.int64))


BOXES = found((0, 0, 10, 10, 0.9, 0), (20, 20, 40, 40, 0.8, 1), (50, 50, 60, 70, 0.6, 2))


def test_the_same_boxes_match_whole() -> None:
    result = match([BOXES], [BOXES], 0.5, TOL)
    assert (result.matched, result.score_diff, result.iou, result.boxes) == (1.0, 0.0, 1.0, 3)


def test_a_moved_box_a_changed_label_and_an_extra_box_each_count_as_unmatched() -> None:
    moved = found((5, 5, 15, 15, 0.9, 0), (20, 20, 40, 40, 0.8, 1), (50, 50, 60, 70, 0.6, 2))  # IoU 0.14
    assert match([BOXES], [moved], 0.5, TOL).matched == pytest.approx(2 / 3)
    relabelled = found((0, 0, 10, 10, 0.9, 1), (20, 20, 40, 40, 0.8, 1), (50, 50, 60, 70, 0.6, 2))
    assert match([BOXES], [relabelled], 0.5, TOL).matched == pytest.approx(2 / 3)
    extra = found(
        (0, 0, 10, 10, 0.9, 0), (20, 20, 40, 40, 0.8, 1), (50, 50, 60, 70, 0.6, 2), (80, 80, 90, 90, 0.7, 0)
    )
    assert match([BOXES], [extra], 0.5, TOL).matched == pytest.approx(3 / 4)


def test_a_score_crossing_the_threshold_by_less_than_the_allowed_difference_is_no_miss() -> None:
    below = found((0, 0, 10, 10, 0.9, 0), (20, 20, 40, 40, 0.8, 1), (50, 50, 60, 70, 0.49, 2))
    result = match([BOXES.above(0.5), found((50, 50, 60, 70, 0.51, 2))], [below, found()], 0.5, TOL)
    assert result.matched < 1.0  # the second sample's box is gone from the variant altogether
    crossing = match([found((50, 50, 60, 70, 0.51, 2))], [found((50, 50, 60, 70, 0.49, 2))], 0.5, TOL)
    assert crossing.matched == 1.0 and crossing.score_diff == pytest.approx(0.02)
    far = match([found((50, 50, 60, 70, 0.6, 2))], [found((50, 50, 60, 70, 0.4, 2))], 0.5, TOL)
    assert far.matched == 0.0


def test_a_variant_that_moves_boxes_fails_with_the_figure_in_its_line() -> None:
    rules = DenseHead(threshold=0.25)
    head = np.zeros((1, 6, 3), dtype=np.float32)
    head[0, :, 0] = [50, 50, 20, 20, 0.9, 0.0]
    head[0, :, 1] = [10, 10, 8, 8, 0.0, 0.7]
    moved = head.copy()
    moved[0, 0, 0] = 70  # the first box 20 px to the right: IoU 0
    decoding = Decoding("yolo", 0.25, head="output0", dense=rules)
    result, failures = verify_boxes({"output0": head}, {"output0": moved}, decoding, TOL)
    assert result.matched == 0.5 and failures == [
        "detections matched 0.500 < 0.95 allowed (of 2 boxes; same label, IoU >= 0.5)"
    ]
    _, none = verify_boxes({"output0": head}, {"output0": head}, decoding, TOL)
    assert none == []


def test_compare_checks_a_detectors_boxes_and_records_each_outputs_figures() -> None:
    head = np.zeros((1, 6, 3), dtype=np.float32)
    head[0, :, 0] = [50, 50, 20, 20, 0.9, 0.0]
    tolerance = Tolerance(detection={"min_matched": 0.99})
    outputs = [TensorSpec(name="output0", dtype="FP32", dims=[6, 3])]
    decoding = Decoding("yolo", 0.25, head="output0", dense=DenseHead())
    noisy = head + np.float32(0.001)
    metrics, failures = compare({"output0": head}, {"output0": noisy}, tolerance, outputs, decoding)
    assert failures == [] and metrics[DETECTIONS].matched == 1.0 and metrics[DETECTIONS].boxes == 1
    assert metrics["output0"].min_cosine is not None  # recorded, not checked
    assert OutputMetrics.from_json(metrics[DETECTIONS].to_json()) == metrics[DETECTIONS]
    _, unknown = compare({"output0": head}, {"output0": head}, tolerance, outputs)
    assert unknown == ["detections: the tolerance matches boxes, and the model has no detection block"]
