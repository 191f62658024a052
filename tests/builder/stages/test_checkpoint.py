"""Each task's checkpoint exports through ``torch.onnx`` and its FP32 graph verifies against the
checkpoint's own module; feature extraction pools as sentence-transformers does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from builder.data import synthetic_samples
from builder.sources import export, load_source
from builder.spec import ModelSpec, Precision, load_spec
from builder.stages.export import torch_reference
from builder.stages.runtimes import run_onnx
from builder.stages.verify import verify_variant
from tests.builder.fixtures import hf_checkpoints as hf

TASKS = {
    "feature-extraction": ("bert", "base"),
    "text-classification": ("sentiment", "sequence"),
    "token-classification": ("ner", "token"),
    "image-classification": ("vit", None),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checkpoints")
    models = []
    for task, (folder, architecture) in TASKS.items():
        if architecture is None:
            hf.vit(root / folder)
        else:
            hf.bert(root / folder, architecture)
        models.append({"name": folder, "source": folder, "task": task})
    (root / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    return root


def _model(project: Path, task: str) -> ModelSpec:
    return load_spec(project / "models.yaml").model(TASKS[task][0])


@pytest.mark.parametrize("task", list(TASKS))
def test_the_exported_graph_verifies_against_the_checkpoint(project: Path, task: str, tmp_path: Path) -> None:
    model = _model(project, task)
    spec_file = project / "models.yaml"
    onnx_file = export(model, spec_dir=project, spec_file=spec_file, out=tmp_path / "model.onnx")
    inputs = synthetic_samples(model, spec_dir=project)
    if task != "image-classification":  # the sample texts through the checkpoint's tokenizer
        assert inputs["attention_mask"].min() == 0 and inputs["input_ids"].max() > 4  # padded, known words
    reference = torch_reference(model, load_source(model, spec_dir=project, spec_file=spec_file), inputs)
    assert reference is not None
    report = verify_variant(model, Precision.FP32, onnx_file, inputs, reference)
    assert report.passed, report.failures
    assert all(m.min_cosine is not None and m.min_cosine > 0.9999 for m in report.metrics.values())


def test_the_embedding_is_the_masked_mean_of_the_hidden_states(project: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModel

    model = _model(project, "feature-extraction")
    onnx_file = export(model, spec_dir=project, spec_file=project / "models.yaml", out=tmp_path / "m.onnx")
    inputs = synthetic_samples(model, spec_dir=project)
    served = run_onnx(onnx_file, inputs, batch_size=model.max_batch_size)
    with torch.inference_mode():
        feed = {k: torch.from_numpy(v) for k, v in inputs.items()}
        hidden = AutoModel.from_pretrained(str(project / "bert"))(**feed).last_hidden_state.numpy()
    mask = inputs["attention_mask"][..., None].astype(np.float32)
    np.testing.assert_allclose(served["embedding"], (hidden * mask).sum(1) / mask.sum(1), atol=1e-4)
    np.testing.assert_allclose(served["last_hidden_state"], hidden, atol=1e-4)
