"""A DETR-family checkpoint's detections, as transformers' object-detection pipeline gives them:
``logits`` ([Q, classes (+1)]) and ``pred_boxes`` ([Q, 4]) of the core model and each image's
``image_size`` -> BOXES (in the image's pixels), SCORES, LABELS (``id2label`` of ``config.json``,
copied beside this file), CLASSES and COUNT, per image.

The queries are read as the checkpoint's image processor reads them (``post_process_object_detection``,
``detection.py``): the config's ``query_scores`` (softmax or sigmoid) and ``top_k`` say how, the
request parameter ``threshold`` (else the config's, the pipeline's 0.5) which scores are kept. A
request gets its own number of boxes; one of several images is padded to its largest count, COUNT
saying each image's. The helpers import without Triton.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import (
    BOXES,
    CLASSES,
    COUNT,
    DEFAULT_THRESHOLD,
    IMAGE_SIZE,
    LABELS,
    QUERY_SCORES,
    SCORES,
    THRESHOLD,
    TOP_K,
)
from .detection import decode_queries, packed, requested_threshold, scaled

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None

LOGITS, PRED_BOXES = "logits", "pred_boxes"  # the core model's outputs, as transformers names them
CHECKPOINT_CONFIG = "config.json"
PIPELINE_THRESHOLD = 0.5  # transformers' ObjectDetectionPipeline.postprocess default


class Queries:
    """One checkpoint's labels and its image processor's way of reading the queries."""

    def __init__(self, config: dict[str, Any], parameters: dict[str, str]) -> None:
        id2label = config.get("id2label") or {}
        self.names = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
        self.scores = parameters.get(QUERY_SCORES, "softmax")
        self.top_k = int(parameters.get(TOP_K, 0))
        self.threshold = float(parameters.get(DEFAULT_THRESHOLD, PIPELINE_THRESHOLD))

    def answer(
        self, logits: NDArray[Any], boxes: NDArray[Any], sizes: NDArray[Any], threshold: float
    ) -> dict[str, NDArray[Any]]:
        """The response's arrays for a request's images (``sizes``: [B, 2] height, width)."""
        found = decode_queries(logits, boxes, scores=self.scores, top_k=self.top_k, threshold=threshold)
        sizes = np.asarray(sizes).reshape(-1, 2)
        return packed([scaled(f, int(h), int(w)) for f, (h, w) in zip(found, sizes, strict=True)], self.names)


def load_queries(folder: str | Path, parameters: dict[str, str]) -> Queries:
    config = json.loads((Path(folder) / CHECKPOINT_CONFIG).read_text(encoding="utf-8"))
    return Queries(config, parameters)


OUTPUT_KEYS = {BOXES: "boxes", SCORES: "scores", LABELS: "labels", CLASSES: "classes", COUNT: "count"}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.queries = load_queries(Path(args["model_repository"]) / args["model_version"], parameters)
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]

    def _one(self, request: Any) -> Any:
        get = pb_utils.get_input_tensor_by_name
        try:
            threshold = requested_threshold(request.parameters(), THRESHOLD, self.queries.threshold)
        except ValueError as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        arrays = self.queries.answer(
            get(request, LOGITS).as_numpy(), get(request, PRED_BOXES).as_numpy(),
            get(request, IMAGE_SIZE).as_numpy(), threshold,
        )  # fmt: skip
        tensors = [pb_utils.Tensor(name, arrays[OUTPUT_KEYS[name]]) for name in self.outputs]
        return pb_utils.InferenceResponse(output_tensors=tensors)
