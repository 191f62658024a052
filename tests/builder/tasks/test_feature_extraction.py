"""Feature extraction: the hidden states and their masked mean out, no post-processing, the
pipeline answering both under its own names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from builder.tasks.feature_extraction import mean_pooled
from tests.builder.tasks.checkpoints import composed, text


def test_the_core_model_gives_the_hidden_states_and_the_embedding() -> None:
    spec = composed(text("feature-extraction"))
    core = spec.model("m")
    assert [(t.name, t.dims) for t in core.outputs] == [("last_hidden_state", [-1, 32]), ("embedding", [32])]
    assert [(t.name, t.dims) for t in core.inputs] == [(n, [-1]) for n in ("input_ids", "token_type_ids",
                                                                          "attention_mask")]  # fmt: skip
    assert core.profiles[0].shapes["input_ids"].max == [64] and core.max_batch_size == 8


def test_there_is_no_postprocessing_and_the_pipeline_answers_the_core_outputs() -> None:
    spec = composed(text("feature-extraction"), max_batch_size=4)
    (pre,) = spec.python_models
    assert pre.name == "m_preprocess" and Path(pre.path).name == "hf_tokenizer"
    (pipeline,) = spec.ensembles
    assert [s.model for s in pipeline.steps] == ["m_preprocess", "m"] and pipeline.max_batch_size == 4
    assert pipeline.steps[1].outputs == {"last_hidden_state": "LAST_HIDDEN_STATE", "embedding": "EMBEDDING"}
    outputs = [(t.name, t.dims) for t in pipeline.outputs]
    assert outputs == [("LAST_HIDDEN_STATE", [-1, 32]), ("EMBEDDING", [32])]


def test_the_embedding_is_the_mean_of_the_tokens_the_mask_keeps() -> None:
    import torch

    hidden = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    pooled = mean_pooled(hidden, mask).numpy()
    np.testing.assert_allclose(pooled[0], hidden[0, :2].mean(0).numpy())
    np.testing.assert_allclose(pooled[1], hidden[1].mean(0).numpy())
    np.testing.assert_allclose(mean_pooled(hidden, None).numpy(), hidden.mean(1).numpy())
