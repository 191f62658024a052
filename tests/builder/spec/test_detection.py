"""A YOLO-style graph with ``task: object-detection`` and a ``detection:`` block: checked against
the graph (its image input, its head, the labels, the letterbox) and composed into a letterbox, a
box decoder and an ensemble; each mistake one line naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from builder.errors import SpecError
from builder.spec import load_spec
from builder.tasks.object_detection import TOLERANCES


def graph(path: Path, inputs: dict[str, list[Any]], outputs: dict[str, list[Any]]) -> str:
    """An .onnx file stating these tensors (its body is never run when the spec loads)."""
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    nodes = [helper.make_node("Constant", [], [name], value=value) for name in outputs]
    model = helper.make_model(helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in outputs.items()],
    ), opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    onnx.save(model, path)
    return path.name


YOLO = {"images": ["batch", 3, 96, 96]}
HEAD = {"output0": ["batch", 8, 180]}


def load(tmp_path: Path, detection: dict[str, Any] | None = None, **entry: Any) -> Any:
    source = entry.pop("source", None) or graph(tmp_path / "det.onnx", YOLO, HEAD)
    model = {"name": "det", "source": source, "task": "object-detection", **entry}
    if detection is not None:
        model["detection"] = detection
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [model]}))
    return load_spec(tmp_path / "models.yaml")


def refused(tmp_path: Path, detection: dict[str, Any] | None = None, **entry: Any) -> str:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, detection, **entry)
    return str(caught.value)


def test_a_yolo_graph_becomes_letterbox_network_and_box_decoder(tmp_path: Path) -> None:
    spec = load(tmp_path, {"labels": ["person", "bicycle", "car", "dog"], "threshold": 0.3})
    core = spec.model("det")
    assert core.detection is not None and core.detection.output == "output0"
    assert (core.detection.layout, core.detection.letterbox.size) == ("channels_first", [96, 96])
    assert core.tolerances[core.precisions[0]].detection is not None
    pre, post = spec.python_models
    assert (Path(pre.path).name, Path(post.path).name) == ("letterbox", "box_decoder")
    assert [(t.name, t.dims) for t in pre.outputs] == [("images", [3, 96, 96]), ("image_size", [2])]
    assert pre.parameters["letterbox_size"] == "96,96" and pre.parameters["layout"] == "NCHW"
    assert json.loads(str(post.parameters["labels"])) == ["person", "bicycle", "car", "dog"]
    assert (post.parameters["threshold"], post.parameters["head_layout"]) == (0.3, "channels_first")
    (pipeline,) = spec.ensembles
    assert [s.model for s in pipeline.steps] == ["det_preprocess", "det", "det_postprocess"]
    assert [t.name for t in pipeline.outputs] == ["BOXES", "SCORES", "LABELS", "CLASSES", "COUNT"]


def test_the_defaults_read_the_class_count_from_the_head_and_match_boxes(tmp_path: Path) -> None:
    spec = load(tmp_path, precisions=["fp32", "fp16"])
    core = spec.model("det")
    assert core.detection is not None and core.detection.labels == [
        "LABEL_0",
        "LABEL_1",
        "LABEL_2",
        "LABEL_3",
    ]
    assert {p.value: t.model_dump(exclude_none=True)["detection"] for p, t in core.tolerances.items()} == {
        p: TOLERANCES[p]["detection"] for p in ("fp32", "fp16")
    }
    labels = tmp_path / "names.txt"
    labels.write_text("a\nb\nc\nd\n")
    assert load(tmp_path, {"labels": "names.txt"}).model("det").detection.labels == ["a", "b", "c", "d"]  # type: ignore[union-attr]


def test_an_anchors_first_head_and_a_dynamic_input_sized_by_the_letterbox(tmp_path: Path) -> None:
    source = graph(tmp_path / "t.onnx", {"images": ["batch", 3, "h", "w"]}, {"out": ["batch", "anchors", 7]})
    spec = load(tmp_path, {"labels": ["a", "b", "c"], "letterbox": {"size": [64, 96]}}, source=source)
    core = spec.model("det")
    assert core.inputs[0].dims == [3, 64, 96] and not core.profiles
    assert core.detection is not None and core.detection.layout == "anchors_first"


@pytest.mark.parametrize(
    ("inputs", "outputs", "detection", "field", "words"),
    [
        ({"images": ["b", 1, 96, 96]}, HEAD, {}, "detection.channels", "RGB needs 3 channels"),
        (YOLO, HEAD, {"labels": ["a", "b"]}, "detection.labels", "2 labels need a head of 4 + 2 = 6"),
        (YOLO, HEAD, {"letterbox": {"size": [64, 64]}}, "detection.letterbox.size", "differs from"),
        ({"images": ["b", 3, "h", "w"]}, HEAD, {}, "detection.letterbox.size", "dynamic height or width"),
        (YOLO, {"a": ["b", 8, 180], "c": ["b", 32]}, {}, "detection.output", "outputs a, c: name the head"),
        (YOLO, HEAD, {"output": "boxes"}, "detection.output", "'boxes' is not an output"),
        (YOLO, {"o": ["b", 180]}, {}, "detection.output", "not [4 + classes, anchors]"),
        (YOLO, {"o": ["b", "c", "a"]}, {}, "detection.layout", "dynamic dims [-1, -1]"),
        (YOLO, HEAD, {"format": "detr"}, "detection.format", "detr is a checkpoint's"),
        (YOLO, HEAD, {"top_k": 3}, "detection", "top_k is not a field of format yolo"),
        (YOLO, HEAD, {"box_format": "yxyx"}, "detection.box_format", "'cxcywh', 'xyxy' or 'xywh'"),
        ({"images": [1, 3, 96, 96]}, {"o": [1, 8, 180]}, {}, "max_batch_size", "must take a batch"),
        ({"a": ["b", 3, 96, 96], "c": ["b", 3, 96, 96]}, HEAD, {}, "inputs", "one image input"),
    ],
)
def test_a_head_or_input_that_does_not_fit_is_one_line_naming_the_field(
    tmp_path: Path,
    inputs: dict[str, list[Any]],
    outputs: dict[str, list[Any]],
    detection: dict[str, Any],
    field: str,
    words: str,
) -> None:
    line = refused(tmp_path, detection, source=graph(tmp_path / "bad.onnx", inputs, outputs))
    assert f"field {field}:" in line or f"{field}:" in line
    assert words in line and "model 'det'" in line


def test_a_task_other_than_detection_needs_a_checkpoint_and_detection_needs_its_task(tmp_path: Path) -> None:
    source = graph(tmp_path / "det.onnx", YOLO, HEAD)
    line = refused(tmp_path, source=source, task="image-classification")
    assert "image-classification takes a checkpoint folder" in line
    model = {"name": "det", "source": source, "detection": {}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [model]}))
    with pytest.raises(SpecError, match="detection: needs task: object-detection"):
        load_spec(tmp_path / "models.yaml")
    boxes = {"name": "m", "source": source, "tolerances": {"fp32": {"detection": {}}}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [boxes]}))
    with pytest.raises(SpecError, match="only an object detector's boxes can be matched"):
        load_spec(tmp_path / "models.yaml")
