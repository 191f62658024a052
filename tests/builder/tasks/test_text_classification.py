"""Text classification: logits per text, labelled by ``hf_classification`` from the checkpoint's
config alone."""

from __future__ import annotations

from pathlib import Path

from tests.builder.tasks.checkpoints import composed, text


def test_the_logits_go_to_the_classifier_which_answers_label_and_scores() -> None:
    spec = composed(text("text-classification", labels=2), precisions=["fp32", "int8_dynamic"])
    core = spec.model("m")
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [2])]
    tolerances = {p.value: t.min_cosine for p, t in core.tolerances.items()}
    assert tolerances == {"fp32": 0.9999, "int8_dynamic": 0.98}  # the precisions asked for
    pre, post = spec.python_models
    assert Path(pre.path).name == "hf_tokenizer"
    assert [t.name for t in pre.outputs] == [t.name for t in core.inputs]
    assert Path(post.path).name == "hf_classification" and post.files == ["ckpt/config.json"]
    assert [(t.name, t.dims) for t in post.outputs] == [("LABEL", [1]), ("SCORE", [1]), ("SCORES", [2])]
    (pipeline,) = spec.ensembles
    assert [t.name for t in pipeline.inputs] == ["TEXT"]
    assert [s.model for s in pipeline.steps] == ["m_preprocess", "m", "m_postprocess"]
    assert pipeline.steps[2].inputs == {"logits": "logits"}
    assert [t.name for t in pipeline.outputs] == ["LABEL", "SCORE", "SCORES"]
