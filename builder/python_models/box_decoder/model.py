"""A YOLO-style detector's boxes from its dense head, by Ultralytics' published rules
(``detection.py``): the head ([4 + classes, anchors], or [anchors, 4 + classes]) and each image's
``image_size`` -> BOXES (xmin, ymin, xmax, ymax in the original image's pixels), SCORES, LABELS,
CLASSES and COUNT, per image.

The config's parameters say how the head is read (``box_format``, ``class_scores``,
``head_layout``), how it is suppressed (``iou_threshold``, ``class_agnostic``,
``max_detections``), the class names (``labels``, a JSON list) and the ``letterbox_size`` the
boxes are mapped back through; the request parameter ``threshold`` (else the config's) which
scores are kept. The helpers import without Triton.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import (
    BOX_FORMAT,
    BOXES,
    CLASS_AGNOSTIC,
    CLASS_NAMES,
    CLASS_SCORES,
    CLASSES,
    COUNT,
    DEFAULT_THRESHOLD,
    HEAD_LAYOUT,
    IMAGE_SIZE,
    IOU_THRESHOLD,
    LABELS,
    LETTERBOX_SIZE,
    MAX_DETECTIONS,
    SCORES,
    THRESHOLD,
)
from .detection import DenseHead, Letterbox, decode_dense, packed, ready, requested_threshold

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None


class Decoder:
    """One head's reading, suppression, class names and letterbox (the config's parameters)."""

    def __init__(self, parameters: dict[str, str]) -> None:
        self.rules = DenseHead(
            box_format=parameters.get(BOX_FORMAT, "cxcywh"),
            class_scores=parameters.get(CLASS_SCORES, "probabilities"),
            channels_first=parameters.get(HEAD_LAYOUT, "channels_first") == "channels_first",
            threshold=float(parameters.get(DEFAULT_THRESHOLD, 0.25)),
            iou_threshold=float(parameters.get(IOU_THRESHOLD, 0.45)),
            class_agnostic=parameters.get(CLASS_AGNOSTIC, "false").lower() == "true",
            max_detections=int(parameters.get(MAX_DETECTIONS, 300)),
        )
        self.names = [str(n) for n in json.loads(parameters.get(CLASS_NAMES, "[]"))]
        height, width = (int(v) for v in parameters[LETTERBOX_SIZE].split(","))
        self.size = (height, width)

    def answer(self, head: NDArray[Any], sizes: NDArray[Any], threshold: float) -> dict[str, NDArray[Any]]:
        found = decode_dense(head, self.rules, threshold)
        sizes = np.asarray(sizes).reshape(-1, 2)
        mapped = [
            Letterbox.fit(int(h), int(w), self.size).to_image(f)
            for f, (h, w) in zip(found, sizes, strict=True)
        ]
        return packed(mapped, self.names)


OUTPUT_KEYS = {BOXES: "boxes", SCORES: "scores", LABELS: "labels", CLASSES: "classes", COUNT: "count"}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.decoder = Decoder(parameters)
        ready()
        self.head_name = next(i["name"] for i in config["input"] if i["name"] != IMAGE_SIZE)
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        get = pb_utils.get_input_tensor_by_name
        try:
            threshold = requested_threshold(request.parameters(), THRESHOLD, self.decoder.rules.threshold)
        except ValueError as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        arrays = self.decoder.answer(
            get(request, self.head_name).as_numpy(), get(request, IMAGE_SIZE).as_numpy(), threshold
        )
        tensors = [pb_utils.Tensor(name, arrays[OUTPUT_KEYS[name]]) for name in self.outputs]
        return pb_utils.InferenceResponse(output_tensors=tensors)
