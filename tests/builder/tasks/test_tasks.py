"""builder.tasks: the registry is keyed by each task's name and names what transformers has; an
unknown task is one line naming the known ones; a task module registered beside the others is
read, composed, exported and verified like them; and the tasks are code of the stages that use them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from builder.cli import main
from builder.data import synthetic_samples
from builder.sources import export, load_source
from builder.spec import ModelSpec, Precision, load_spec
from builder.stages.code import ROOT, closure, code_fingerprint
from builder.stages.export import ExportInputs, torch_reference
from builder.stages.int8_ranges import Int8RangesInputs
from builder.stages.reference import ReferenceInputs
from builder.stages.verify import verify_variant
from builder.tasks import TASKS, UnknownTask, task, task_for_architecture
from builder.tasks.base import Checkpoint, Entry, Modality, same, tensor
from builder.tasks.text import TextTask
from tests.builder.code_edits import CodeEdits
from tests.builder.fixtures import hf_checkpoints as hf
from tests.builder.sources.entries import model

NAMES = [
    "feature-extraction", "text-classification", "token-classification", "text-ranking",
    "image-classification", "object-detection",
]  # fmt: skip


class FillMask(TextTask):
    """A task as a new module would state it: masked-token logits, the pipeline answering them."""

    name = "fill-mask"
    auto_class = "AutoModelForMaskedLM"
    mapping = "MODEL_FOR_MASKED_LM_MAPPING_NAMES"
    architecture_suffix = "ForMaskedLM"

    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor("logits", "FP32", [-1, -1])]

    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        return result.logits

    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        return [{"model": name, "inputs": same(ckpt.inputs), "outputs": {"logits": "LOGITS"}}]

    def pipeline_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        return [tensor("LOGITS", "FP32", [-1, -1])]


def test_the_registry_is_keyed_by_each_tasks_name_and_names_what_transformers_has() -> None:
    import transformers
    from transformers.models.auto import modeling_auto

    assert list(TASKS) == NAMES and all(t.name == name for name, t in TASKS.items())
    assert [t.modality for t in TASKS.values()] == [Modality.TEXT] * 4 + [Modality.IMAGE] * 2
    for t in TASKS.values():
        assert hasattr(transformers, t.auto_class) and hasattr(modeling_auto, t.mapping)
    assert task_for_architecture("BertForTokenClassification") is TASKS["token-classification"]
    assert task_for_architecture("ViTModel") is TASKS["feature-extraction"]
    assert task_for_architecture("DetrForObjectDetection") is TASKS["object-detection"]
    assert task_for_architecture("BertForMaskedLM") is None
    # two tasks end in ForSequenceClassification: the first, unless the other claims the config
    assert task_for_architecture("BertForSequenceClassification") is TASKS["text-classification"]
    one_label = {"id2label": {"0": "LABEL_0"}}
    assert task_for_architecture("BertForSequenceClassification", one_label) is TASKS["text-ranking"]


@pytest.mark.parametrize("name", ["summarization", None, 3])
def test_an_unknown_task_is_one_line_naming_the_known_ones(name: object) -> None:
    with pytest.raises(UnknownTask) as caught:
        task(name)
    assert str(caught.value) == f"unknown task {name!r}: one of {', '.join(NAMES)}"


def test_the_spec_field_task_takes_only_a_registered_name() -> None:
    assert model("ckpt", task="token-classification").task == "token-classification"
    with pytest.raises(ValidationError) as caught:
        model("ckpt", task="summarization")
    error = caught.value.errors()[0]  # the one the spec's one line reports
    assert error["loc"] == ("task",) and "one of feature-extraction, text-classification" in error["msg"]
    dumped = model("ckpt", task="token-classification").model_dump(mode="json")
    assert dumped["task"] == "token-classification"  # as the enum it was dumped: stage keys hold
    assert "task" not in model("m.onnx").model_dump(mode="json")


@pytest.fixture
def fill_mask(monkeypatch: pytest.MonkeyPatch) -> FillMask:
    """The new module's one registry line."""
    monkeypatch.setitem(TASKS, FillMask.name, FillMask())
    return FillMask()


def test_a_registered_task_module_is_read_composed_exported_and_verified(
    fill_mask: FillMask, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hf.bert(tmp_path / "masked", "masked")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "masked"]) == 0  # config.architectures names it now
    (entry,) = yaml.safe_load(capsys.readouterr().out)["models"]
    assert entry == {"name": "masked", "source": "masked", "task": "fill-mask"}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    spec = load_spec(tmp_path / "models.yaml")
    core = spec.model("masked")
    assert [t.name for t in core.outputs] == ["logits"]
    assert [m.name for m in spec.python_models] == ["masked_preprocess"]  # no post-processing
    assert [s.model for s in spec.ensembles[0].steps] == ["masked_preprocess", "masked"]
    _exports_and_verifies(core, tmp_path)


def _exports_and_verifies(core: ModelSpec, folder: Path) -> None:
    spec_file = folder / "models.yaml"
    onnx_file = export(core, spec_dir=folder, spec_file=spec_file, out=folder / "model.onnx")
    inputs = synthetic_samples(core, spec_dir=folder)  # the sample texts, through its tokenizer
    reference = torch_reference(core, load_source(core, spec_dir=folder, spec_file=spec_file), inputs)
    assert reference is not None and reference["logits"].shape[-1] == len(hf.VOCAB)
    report = verify_variant(core, Precision.FP32, onnx_file, inputs, reference)
    assert report.passed, report.failures


def test_a_task_module_is_code_of_the_stages_that_read_the_checkpoint_or_its_data() -> None:
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "builder" / "tasks").glob("*.py")}
    for inputs in (ExportInputs, ReferenceInputs, Int8RangesInputs):
        assert modules <= {str(p.relative_to(ROOT)) for p in closure(inputs.CODE)}, inputs.STAGE


def test_editing_a_task_module_changes_the_export_stages_code(monkeypatch: pytest.MonkeyPatch) -> None:
    before = code_fingerprint(ExportInputs.CODE)
    with CodeEdits(monkeypatch) as edits:
        edits.comment("builder/tasks/token_classification.py")
        assert code_fingerprint(ExportInputs.CODE) != before
