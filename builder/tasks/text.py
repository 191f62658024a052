"""What a text task does as text: the checkpoint's tokenizer before the core model.

The core model takes the tokenizer's ``model_input_names`` (INT64, one dynamic axis up to the
checkpoint's longest text), ``<name>_preprocess`` is ``hf_tokenizer`` with the checkpoint's
tokenizer files, and calibration or evaluation data are a text file, one text a line, through that
tokenizer; without evaluation data a variant is verified on ``SAMPLE_TEXTS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from builder.python_models.shared.processing_contract import MAX_LENGTH, TEXT
from builder.tasks.base import (
    PYTHON_MODELS,
    Checkpoint,
    CheckpointTask,
    CoreInputs,
    Entry,
    Modality,
    Samples,
    preprocess_name,
    tensor,
)

OPT_SEQUENCE = 128  # the profile's opt length, unless the checkpoint's longest is shorter

# A text checkpoint without evaluation data is verified on these, through its own tokenizer.
SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "I loved this film, the acting was wonderful!",
    "The service was slow and the food arrived cold.",
    "John Smith moved from Berlin to New York in 2019.",
    "Can you recommend a good book about the history of science?",
    "Hugging Face hosts models, datasets and demos.",
    "It rained all day.",
)


class TextTask(CheckpointTask):
    modality: ClassVar[Modality] = Modality.TEXT
    data_description: ClassVar[str] = "a text file, one a line"

    def core_inputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor(n, "INT64", [-1]) for n in ckpt.inputs]

    def profiles(self, ckpt: Checkpoint) -> list[Entry]:
        shape = {"min": [1], "opt": [min(OPT_SEQUENCE, ckpt.max_length)], "max": [ckpt.max_length]}
        return [{"shapes": {n: shape for n in ckpt.inputs}}]

    def feed(self, feed: dict[str, Any], accepted: set[str]) -> dict[str, Any]:
        if "token_type_ids" in accepted:
            import torch

            # Slicing the model's own buffer by the sequence length exports as Min(512, seq),
            # which ONNX Runtime's shape inference refuses: zeros are what it holds.
            feed.setdefault("token_type_ids", torch.zeros_like(feed["input_ids"]))
        return feed

    def preprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        return {
            "name": preprocess_name(name), "path": str(PYTHON_MODELS / "hf_tokenizer"),
            "inputs": [tensor(TEXT, "STRING", [1])], "outputs": self.preprocess_outputs(ckpt),
            "parameters": {MAX_LENGTH: ckpt.max_length}, "files": ckpt.files, **common,
        }  # fmt: skip

    def preprocess_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        """What ``hf_tokenizer`` hands on: the core inputs (a task may ask for more of its outputs)."""
        return [tensor(n, "INT64", [-1]) for n in ckpt.inputs]

    def read_data(self, path: Path, core: CoreInputs) -> Samples:
        lines = path.read_text(encoding="utf-8").splitlines()
        return tokens(core, [line for line in lines if line.strip() and not line.startswith("#")])

    def sample_inputs(self, core: CoreInputs, count: int) -> Samples | None:
        return tokens(core, list(SAMPLE_TEXTS[:count]))


def tokens(core: CoreInputs, texts: list[str]) -> Samples:
    """The texts through the checkpoint's tokenizer, padded to the longest and truncated at the
    profile's longest, as int64 arrays per core input."""
    from transformers import AutoTokenizer

    if not texts:
        raise ValueError("no texts")
    tokenizer = AutoTokenizer.from_pretrained(str(core.folder))
    longest = next(iter(core.largest.values()))[0]
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=longest, return_tensors="np")
    return {name: np.asarray(encoded[name], dtype=np.int64) for name in core.largest}
