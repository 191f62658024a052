"""Image classification: pixel values at the processor's size in, logits labelled by
``hf_classification``; the pipeline takes encoded images."""

from __future__ import annotations

from pathlib import Path

from tests.builder.tasks.checkpoints import composed, image


def test_the_pixels_come_from_the_image_processor_and_the_logits_go_to_the_classifier() -> None:
    spec = composed(image("image-classification", labels=3))
    core = spec.model("m")
    assert [(t.name, t.dtype.value, t.dims) for t in core.inputs] == [("pixel_values", "FP32", [3, 32, 32])]
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [3])] and core.profiles == []
    pre, post = spec.python_models
    assert Path(pre.path).name == "hf_image_processor" and pre.parameters == {}
    assert [t.name for t in pre.inputs] == ["IMAGE"] and pre.files == ["ckpt/preprocessor_config.json",
                                                                       "ckpt/config.json"]  # fmt: skip
    assert Path(post.path).name == "hf_classification"
    (pipeline,) = spec.ensembles
    assert [t.name for t in pipeline.inputs] == ["IMAGE"]
    assert [(s.model, s.inputs) for s in pipeline.steps] == [
        ("m_preprocess", {"IMAGE": "IMAGE"}), ("m", {"pixel_values": "pixel_values"}),
        ("m_postprocess", {"logits": "logits"}),
    ]  # fmt: skip
    assert [t.name for t in pipeline.outputs] == ["LABEL", "SCORE", "SCORES"]
