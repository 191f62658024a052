"""Feature extraction: a text encoder's ``last_hidden_state`` and its mean over the attention mask
(``embedding``, as sentence-transformers pools, not normalised). No post-processing: the pipeline
answers ``LAST_HIDDEN_STATE`` and ``EMBEDDING``."""

from __future__ import annotations

from typing import Any

from builder.tasks.base import Checkpoint, Entry, same, tensor
from builder.tasks.text import TextTask

# The core model's outputs and the pipeline's names for them.
OUTPUTS = {"last_hidden_state": "LAST_HIDDEN_STATE", "embedding": "EMBEDDING"}


class FeatureExtraction(TextTask):
    name = "feature-extraction"
    auto_class = "AutoModel"
    mapping = "MODEL_MAPPING_NAMES"
    architecture_suffix = "Model"

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [
            tensor("last_hidden_state", "FP32", [-1, ckpt.hidden_size]),
            tensor("embedding", "FP32", [ckpt.hidden_size]),
        ]

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        hidden = result.last_hidden_state
        return hidden, mean_pooled(hidden, feed.get("attention_mask"))

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        return [{"model": name, "inputs": same(ckpt.inputs), "outputs": dict(OUTPUTS)}]

    def pipeline_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [{**t, "name": OUTPUTS[t["name"]]} for t in self.core_outputs(ckpt)]


def mean_pooled(hidden: Any, mask: Any) -> Any:
    """Mean over the tokens the attention mask keeps. A Where, not a Cast of the mask to float:
    onnxconverter-common's FP16 conversion keeps a Cast's target at float while retyping its output."""
    import torch

    if mask is None:
        return hidden.mean(dim=1)
    keep = mask.unsqueeze(-1) > 0
    count = torch.where(keep, 1.0, 0.0).sum(dim=1)
    return torch.where(keep, hidden, 0.0).sum(dim=1) / count.clamp(min=1.0)
