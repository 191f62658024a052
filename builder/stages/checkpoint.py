"""A Hugging Face checkpoint as the torch module the export stage traces, per task.

Optimum's ONNX exporter (``optimum-onnx`` 0.1.0) requires transformers < 4.58, so it cannot sit
beside the pinned transformers 5.x; the checkpoint's ``AutoModelFor<task>`` is wrapped instead in
a module whose positional inputs are the spec's inputs (the tokenizer's ``model_input_names`` or
``pixel_values``) and whose outputs are the spec's, and ``torch.onnx.export`` traces that.
Feature extraction returns ``last_hidden_state`` and its mean over the attention mask (as
sentence-transformers pools, without normalising); the classification tasks return ``logits``.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from builder.spec import ModelSpec, Task
from builder.spec.checkpoint import TASKS


def checkpoint_folder(model: ModelSpec, spec_dir: Path) -> Path:
    return Path(model.source) if Path(model.source).is_absolute() else spec_dir / model.source


def load_model(model: ModelSpec, spec_dir: Path) -> Any:
    """The checkpoint's transformers model for its task, FP32, eval mode, eager attention (plain
    MatMul/Softmax in the graph, which ONNX Runtime's fusions and the quantizer recognise)."""
    assert model.task is not None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    auto = getattr(transformers, TASKS[model.task].auto_class)
    folder = str(checkpoint_folder(model, spec_dir))
    return auto.from_pretrained(folder, attn_implementation="eager").float().eval()


def checkpoint_module(model: ModelSpec, spec_dir: Path) -> Any:
    """The module ``torch.onnx.export`` and the reference stage run: spec inputs in, spec outputs out."""
    import torch

    inner = load_model(model, spec_dir)
    names = [t.name for t in model.inputs]
    accepted = set(inspect.signature(inner.forward).parameters)
    task = model.task

    class CheckpointModule(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: torch.Tensor) -> Any:
            feed = dict(zip(names, tensors, strict=True))
            if task is not Task.IMAGE_CLASSIFICATION and "token_type_ids" in accepted:
                # Slicing the model's own buffer by the sequence length exports as Min(512, seq),
                # which ONNX Runtime's shape inference refuses: zeros are what it holds.
                feed.setdefault("token_type_ids", torch.zeros_like(feed["input_ids"]))
            result = self.inner(**feed)
            if task is Task.FEATURE_EXTRACTION:
                hidden = result.last_hidden_state
                return hidden, _mean_pooled(hidden, feed.get("attention_mask"))
            return result.logits

    return CheckpointModule().eval()


def _mean_pooled(hidden: Any, mask: Any) -> Any:
    """Mean over the tokens the attention mask keeps. A Where, not a Cast of the mask to float:
    onnxconverter-common's FP16 conversion keeps a Cast's target at float while retyping its output."""
    import torch

    if mask is None:
        return hidden.mean(dim=1)
    keep = mask.unsqueeze(-1) > 0
    count = torch.where(keep, 1.0, 0.0).sum(dim=1)
    return torch.where(keep, hidden, 0.0).sum(dim=1) / count.clamp(min=1.0)
