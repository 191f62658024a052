"""Relevance scores from a cross-encoder's logit, as sentence-transformers' ``CrossEncoder.predict``
gives them: logits (FP32, [1]) -> SCORE (FP32, [1]).

The activation is the one ``config.json`` (copied beside this file) names, by sentence-transformers'
rule (``CrossEncoder.get_default_activation_fn``): ``sentence_transformers.activation_fn`` (or the
older ``sbert_ce_default_activation_function``), else a sigmoid for one label and the logits as
they are for more. A named activation that is not one of ``ACTIVATIONS`` is refused (``activation``
raises ValueError), which the builder asks when the spec loads. The helpers import without Triton.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .contract import CHECKPOINT_CONFIG, LOGITS, SCORE

try:  # only inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported as a library (tests, the builder)
    pb_utils = None

# torch.nn activations a checkpoint may name, by class name, as numpy functions of float32 logits.
ACTIVATIONS: dict[str, Callable[[NDArray[Any]], NDArray[Any]]] = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Identity": lambda x: x,
    "Tanh": np.tanh,
}


def activation(config: dict[str, Any]) -> str:
    """The name in ACTIVATIONS that sentence-transformers applies to this config's logits."""
    named = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    if named:
        # sentence-transformers loads only torch's own ("torch.") without trust_remote_code, else
        # falls back to its default: so does this.
        if not str(named).startswith("torch."):
            return _default(config)
        name = str(named).rsplit(".", 1)[-1]
        if name not in ACTIVATIONS:
            raise ValueError(f"activation_fn {named!r} is not one of {', '.join(ACTIVATIONS)}")
        return name
    return _default(config)


def _default(config: dict[str, Any]) -> str:
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels") or 1)
    return "Sigmoid" if labels == 1 else "Identity"


class Scorer:
    """One checkpoint's activation over its logits."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.activation = activation(config)

    def scores(self, logits: NDArray[Any]) -> NDArray[Any]:
        x = np.asarray(logits, dtype=np.float32)
        with np.errstate(over="ignore"):  # exp overflows to inf for very negative logits: sigmoid 0
            return np.asarray(ACTIVATIONS[self.activation](x), dtype=np.float32)


def load_scorer(folder: str | Path) -> Scorer:
    return Scorer(json.loads((Path(folder) / CHECKPOINT_CONFIG).read_text(encoding="utf-8")))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.scorer = load_scorer(Path(args["model_repository"]) / args["model_version"])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, LOGITS).as_numpy()
            scores = self.scorer.scores(logits)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(SCORE, scores)]))
        return responses
