"""A Hugging Face checkpoint as the torch module the export stage traces, as its task says.

Optimum's ONNX exporter (``optimum-onnx`` 0.1.0) requires transformers < 4.58, so it cannot sit
beside the pinned transformers 5.x; the checkpoint's ``AutoModelFor<task>`` is wrapped instead in
a module whose positional inputs are the spec's inputs (the tokenizer's ``model_input_names`` or
``pixel_values``) and whose outputs are the spec's, and ``torch.onnx.export`` traces that. The
task (``builder/tasks/``) names the auto class, completes the model's arguments and picks the
outputs from transformers' (feature extraction: ``last_hidden_state`` and its mean over the
attention mask; the classification tasks: ``logits``).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from builder.spec import ModelSpec
from builder.tasks import task
from builder.tasks.base import CheckpointTask


def checkpoint_folder(model: ModelSpec, spec_dir: Path) -> Path:
    return Path(model.source) if Path(model.source).is_absolute() else spec_dir / model.source


def served_task(model: ModelSpec) -> CheckpointTask:
    assert model.task is not None  # a checkpoint entry names its task
    return task(model.task)


def load_model(model: ModelSpec, spec_dir: Path) -> Any:
    """The checkpoint's transformers model for its task, FP32, eval mode, eager attention (plain
    MatMul/Softmax in the graph, which ONNX Runtime's fusions and the quantizer recognise)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    auto = getattr(transformers, served_task(model).auto_class)
    folder = str(checkpoint_folder(model, spec_dir))
    return auto.from_pretrained(folder, attn_implementation="eager").float().eval()


def checkpoint_module(model: ModelSpec, spec_dir: Path) -> Any:
    """The module ``torch.onnx.export`` and the reference stage run: spec inputs in, spec outputs out."""
    import torch

    inner = load_model(model, spec_dir)
    names = [t.name for t in model.inputs]
    accepted = set(inspect.signature(inner.forward).parameters)
    served = served_task(model)

    class CheckpointModule(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: torch.Tensor) -> Any:
            feed = served.feed(dict(zip(names, tensors, strict=True)), accepted)
            return served.traced_outputs(self.inner(**feed), feed)

    return CheckpointModule().eval()
