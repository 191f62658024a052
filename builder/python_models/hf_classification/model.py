"""Labels and scores from a classifier's logits, as transformers' text- and image-classification
pipelines give them: logits (FP32, [num_labels]) -> LABEL (the top class's ``id2label`` name),
SCORE (its score) and SCORES (every class's, in id order).

The scores are a softmax over the classes, or a sigmoid when ``config.json`` (copied beside this
file) says ``problem_type: multi_label_classification`` or has one label, and the logits as they
are for ``regression``, as the pipelines choose. The helpers import without Triton.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import CHECKPOINT_CONFIG, LABEL, LOGITS, SCORE, SCORES

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests)
    pb_utils = None


class Labeller:
    """``id2label`` and the scoring function of one checkpoint's config."""

    def __init__(self, config: dict[str, Any]) -> None:
        id2label = config.get("id2label") or {}
        self.labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
        problem = config.get("problem_type")
        if problem == "regression":
            self.function = "none"
        elif problem == "multi_label_classification" or len(self.labels) == 1:
            self.function = "sigmoid"
        else:
            self.function = "softmax"

    def scores(self, logits: NDArray[Any]) -> NDArray[Any]:
        x = np.asarray(logits, dtype=np.float32)
        if self.function == "sigmoid":
            return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
        if self.function == "softmax":
            shifted = np.exp(x - x.max(axis=-1, keepdims=True))
            return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True), dtype=np.float32)
        return x

    def label(self, logits: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """LABEL [B, 1] (bytes), SCORE [B, 1] and SCORES [B, num_labels] for logits [B, num_labels]."""
        scores = self.scores(logits)
        top = scores.argmax(axis=-1)
        names = np.array([[self.labels[i].encode("utf-8")] for i in top], dtype=object).reshape(-1, 1)
        best = np.take_along_axis(scores, top[:, None], axis=-1).astype(np.float32)
        return names, best, scores


def load_labeller(folder: str | Path) -> Labeller:
    return Labeller(json.loads((Path(folder) / CHECKPOINT_CONFIG).read_text(encoding="utf-8")))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.labeller = load_labeller(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, LOGITS).as_numpy()
            names, best, scores = self.labeller.label(logits.reshape(-1, logits.shape[-1]))
            outputs = [pb_utils.Tensor(LABEL, names), pb_utils.Tensor(SCORE, best),
                       pb_utils.Tensor(SCORES, scores)]  # fmt: skip
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
