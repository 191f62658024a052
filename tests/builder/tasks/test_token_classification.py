"""Token classification: logits per token; the tokenizer also hands the offsets and special-token
mask to ``hf_token_classification``, which answers per token and grouped entities."""

from __future__ import annotations

from pathlib import Path

from tests.builder.tasks.checkpoints import TOKENIZER, composed, text


def test_the_labeller_gets_the_text_the_tokens_their_offsets_and_the_logits() -> None:
    spec = composed(text("token-classification", labels=5))
    core = spec.model("m")
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [-1, 5])]
    pre, post = spec.python_models
    assert [t.name for t in pre.outputs] == [
        "input_ids", "token_type_ids", "attention_mask", "offset_mapping", "special_tokens_mask",
    ]  # fmt: skip
    assert pre.parameters == {"max_length": 64}
    assert Path(post.path).name == "hf_token_classification" and post.files == TOKENIZER
    assert [t.name for t in post.inputs] == [
        "TEXT", "input_ids", "offset_mapping", "special_tokens_mask", "logits",
    ]  # fmt: skip
    (pipeline,) = spec.ensembles
    assert [s.model for s in pipeline.steps] == ["m_preprocess", "m", "m_postprocess"]
    assert set(pipeline.steps[0].outputs) == {t.name for t in pre.outputs}
    assert set(pipeline.steps[2].inputs) == {t.name for t in post.inputs}
    assert [t.name for t in pipeline.outputs] == ["TOKENS", "TOKEN_LABELS", "TOKEN_SCORES", "ENTITIES"]
