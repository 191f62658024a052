"""The checkpoint pre/post-processing models' helpers, without Triton: the scoring function a
config implies, and entity grouping as transformers' ``aggregation_strategy="simple"`` groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.python_models.hf_classification.model import Labeller
from builder.python_models.hf_token_classification.model import Tagger, Token
from tests.builder.fixtures import hf_checkpoints as hf


@pytest.mark.parametrize(
    ("config", "function"),
    [
        ({"id2label": {"0": "a", "1": "b"}}, "softmax"),
        ({"id2label": {"0": "a"}}, "sigmoid"),
        ({"id2label": {"0": "a", "1": "b"}, "problem_type": "multi_label_classification"}, "sigmoid"),
        ({"id2label": {"0": "a"}, "problem_type": "regression"}, "none"),
    ],
)
def test_the_scores_follow_the_config_as_the_pipelines_choose(
    config: dict[str, object], function: str
) -> None:
    labeller = Labeller(config)
    assert labeller.function == function
    logits = np.array([[2.0, -1.0][: len(labeller.labels)]], dtype=np.float32)
    names, best, scores = labeller.label(logits)
    assert names[0][0] == b"a" and best.shape == (1, 1) and scores.shape == logits.shape
    expected = {
        "softmax": np.exp(2.0) / (np.exp(2.0) + np.exp(-1.0)),
        "sigmoid": 1 / (1 + np.exp(-2.0)),
        "none": 2.0,
    }
    assert best[0][0] == pytest.approx(expected[function], rel=1e-6)


def test_entities_group_adjacent_tags_a_b_tag_starts_anew_and_o_is_left_out(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    hf.save_tokenizer(tmp_path)
    tagger = Tagger(AutoTokenizer.from_pretrained(str(tmp_path)), {"id2label": hf.ENTITIES})
    tags = [("john", "B-PER", 0.9), ("lives", "I-PER", 0.7), ("in", "O", 0.99), ("paris", "B-LOC", 0.8),
            ("##s", "I-LOC", 0.6), ("berlin", "B-LOC", 0.5), ("city", "LOC", 0.4)]  # fmt: skip
    tokens, start = [], 0
    for word, label, score in tags:
        tokens.append(Token(word, label, score, start, start + len(word)))
        start += len(word) + 1
    entities = tagger.entities(tokens)
    assert [(e["entity_group"], e["word"]) for e in entities] == [
        ("PER", "john lives"), ("LOC", "pariss"), ("LOC", "berlin city")
    ]  # fmt: skip
    assert entities[0]["score"] == pytest.approx(0.8) and (entities[0]["start"], entities[0]["end"]) == (
        0,
        10,
    )
