"""Text ranking: a cross-encoder's relevance score for each (query, document) pair, as
sentence-transformers' ``CrossEncoder.predict`` and ``rank`` give it (the Hub's ``text-ranking``).

The pipeline takes TEXT (the query) and TEXT_PAIR (the document) per row; ``hf_tokenizer`` encodes
them as the tokenizer's text pair, truncated ``only_second`` at the checkpoint's longest (the
document is cut, never the query) and answers each pair's length before truncation (NUM_TOKENS);
the core model's one logit per pair is turned into SCORE by ``hf_cross_encoder`` with the activation
the checkpoint's config names (sentence-transformers' rule: a sigmoid for one label unless the config
says otherwise). A checkpoint with more than one label is refused when the spec loads: a reranker
scores a pair with one number, as sentence-transformers' ``rank`` and vLLM's score API require.

Calibration and evaluation data are a text file of pairs, one a line, the query and the document
separated by a tab; without evaluation data a variant is verified on ``SAMPLE_PAIRS``. A variant's
logits are held to ``max_abs`` (a cosine of one number says only its sign).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from builder.python_models.hf_cross_encoder.model import activation
from builder.python_models.shared.processing_contract import (
    CHECKPOINT_CONFIG,
    LOGITS,
    NUM_TOKENS,
    ONLY_SECOND,
    SCORE,
    TEXT,
    TEXT_PAIR,
    TRUNCATION,
)
from builder.tasks.base import (
    PYTHON_MODELS,
    Checkpoint,
    CoreInputs,
    Entry,
    Samples,
    postprocess_name,
    same,
    tensor,
)
from builder.tasks.text import SAMPLE_TEXTS, TextTask

SEPARATOR = "\t"  # between a data line's query and document
# A cross-encoder without evaluation data is verified on these, through its own tokenizer.
SAMPLE_QUERIES = ("Where is Paris?", "What did the cat do?")
SAMPLE_PAIRS = tuple((SAMPLE_QUERIES[(i + j) % 2], d) for j in (0, 1) for i, d in enumerate(SAMPLE_TEXTS))
# Per precision, on the logit: fp32 keeps sentence-transformers' scores within 1e-4.
RANKING_TOLERANCES: dict[str, Entry] = {
    "fp32": {"max_abs": 1e-4},
    "fp16": {"max_abs": 0.02},
    "int8": {"max_abs": 0.25},
    "int8_dynamic": {"max_abs": 0.25},
}


class TextRanking(TextTask):
    name = "text-ranking"
    auto_class = "AutoModelForSequenceClassification"
    mapping = "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"
    architecture_suffix = "ForSequenceClassification"
    data_description: ClassVar[str] = "a text file of pairs, one a line: the query, a tab, the document"
    tolerances: ClassVar[dict[str, Entry]] = RANKING_TOLERANCES

    def refusal(self, ckpt: Checkpoint) -> str | None:
        if len(ckpt.labels) != 1:
            return (f"a reranker scores a pair with one logit; the checkpoint has {len(ckpt.labels)} labels "
                    "(serve it as text-classification)")  # fmt: skip
        config = json.loads((ckpt.folder / CHECKPOINT_CONFIG).read_text(encoding="utf-8"))
        try:
            activation(config)
        except ValueError as exc:
            return str(exc)
        return None

    def claims(self, config: dict[str, Any]) -> bool:
        """A sequence classifier with one label scores pairs: ``tritonforge init`` offers this task."""
        return len(config.get("id2label") or {}) == 1 or config.get("num_labels") == 1

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor(LOGITS, "FP32", [1])]

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return result.logits

    def preprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        entry = super().preprocess(ckpt, name, common)
        entry["inputs"] = [tensor(TEXT, "STRING", [1]), tensor(TEXT_PAIR, "STRING", [1])]
        entry["parameters"] = {**entry["parameters"], TRUNCATION: ONLY_SECOND}
        return entry

    def preprocess_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [*super().preprocess_outputs(ckpt), tensor(NUM_TOKENS, "INT64", [1])]

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        return {"name": postprocess_name(name), "path": str(PYTHON_MODELS / "hf_cross_encoder"),
                "inputs": self.core_outputs(ckpt), "outputs": [tensor(SCORE, "FP32", [1])],
                "files": [ckpt.file(CHECKPOINT_CONFIG)], **common}  # fmt: skip

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        return [
            {"model": name, "inputs": same(ckpt.inputs), "outputs": same([LOGITS])},
            {"model": postprocess_name(name), "inputs": same([LOGITS]), "outputs": same([SCORE])},
        ]

    def pipeline_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor(SCORE, "FP32", [1]), tensor(NUM_TOKENS, "INT64", [1])]

    def read_data(self, path: Path, core: CoreInputs) -> Samples:
        pairs = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            query, sep, document = line.partition(SEPARATOR)
            if not sep:
                raise ValueError(f"line {number} has no tab between the query and the document")
            pairs.append((query, document))
        return pair_tokens(core, pairs)

    def sample_inputs(self, core: CoreInputs, count: int) -> Samples | None:
        return pair_tokens(core, list(SAMPLE_PAIRS[:count]))


def pair_tokens(core: CoreInputs, pairs: list[tuple[str, str]]) -> Samples:
    """The pairs through the checkpoint's tokenizer as ``hf_tokenizer`` encodes them (padded to the
    longest, truncated ``only_second`` at the profile's longest), as int64 arrays per core input."""
    from transformers import AutoTokenizer

    if not pairs:
        raise ValueError("no pairs")
    tokenizer = AutoTokenizer.from_pretrained(str(core.folder))
    longest = next(iter(core.largest.values()))[0]
    queries, documents = [q for q, _ in pairs], [d for _, d in pairs]
    encoded = tokenizer(queries, documents, padding=True, truncation=ONLY_SECOND, max_length=longest,
                        return_tensors="np")  # fmt: skip
    return {name: np.asarray(encoded[name], dtype=np.int64) for name in core.largest}
