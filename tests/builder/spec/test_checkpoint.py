"""A Hugging Face checkpoint folder as a source: the entry it expands into, and its errors (one line
naming the file and field, exit status 2), plus ``tritonforge init`` on a checkpoint folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from builder.cli import main
from builder.errors import SpecError
from builder.sources import source_of
from builder.spec import load_spec
from builder.spec.checkpoint import task_of
from builder.tasks import TASKS
from tests.builder.fixtures import hf_checkpoints as hf


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checkpoints")
    hf.bert(root / "bert", "base")
    hf.bert(root / "ner", "token")
    hf.vit(root / "vit")
    return root


def _spec(folder: Path, *models: dict[str, object]) -> Path:
    path = folder / "models.yaml"
    path.write_text(yaml.safe_dump({"models": list(models)}, sort_keys=False))
    return path


def test_a_token_classifier_becomes_a_model_its_tokenizer_its_labeller_and_a_pipeline(
    checkpoints: Path,
) -> None:
    spec = load_spec(_spec(checkpoints, {"name": "ner", "source": "ner", "task": "token-classification"}))
    core = spec.model("ner")
    assert core.task == "token-classification" and source_of(core).kind == "checkpoint"
    assert [t.name for t in core.inputs] == ["input_ids", "token_type_ids", "attention_mask"]
    assert [(t.name, t.dims) for t in core.outputs] == [("logits", [-1, len(hf.ENTITIES)])]
    assert core.profiles[0].shapes["input_ids"].max == [64]  # the checkpoint's max_position_embeddings
    pre, post = spec.python_models
    assert (pre.name, post.name) == ("ner_preprocess", "ner_postprocess")
    assert [t.name for t in pre.outputs][-2:] == ["offset_mapping", "special_tokens_mask"]
    assert {Path(f).name for f in pre.files} >= {"tokenizer.json", "config.json"}
    (ensemble,) = spec.ensembles
    assert ensemble.name == "ner_pipeline" and [t.name for t in ensemble.inputs] == ["TEXT"]
    assert [s.model for s in ensemble.steps] == ["ner_preprocess", "ner", "ner_postprocess"]
    assert [t.name for t in ensemble.outputs] == ["TOKENS", "TOKEN_LABELS", "TOKEN_SCORES", "ENTITIES"]


def test_feature_extraction_has_no_postprocessing_and_images_take_the_processor_size(
    checkpoints: Path,
) -> None:
    spec = load_spec(_spec(
        checkpoints,
        {"name": "embed", "source": "bert", "task": "feature-extraction", "max_batch_size": 4},
        {"name": "vision", "source": "vit", "task": "image-classification"},
    ))  # fmt: skip
    assert [(t.name, t.dims) for t in spec.model("embed").outputs] == [
        ("last_hidden_state", [-1, 32]), ("embedding", [32])
    ]  # fmt: skip
    assert [(t.name, t.dims) for t in spec.model("vision").inputs] == [("pixel_values", [3, 32, 32])]
    assert [m.name for m in spec.python_models] == [
        "embed_preprocess",
        "vision_preprocess",
        "vision_postprocess",
    ]
    assert {e.name: e.max_batch_size for e in spec.ensembles} == {"embed_pipeline": 4, "vision_pipeline": 8}


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        (
            {"source": "missing", "task": "feature-extraction"},
            "source",
            "checkpoint folder 'missing' not found",
        ),
        ({"source": "empty", "task": "feature-extraction"}, "source", "has no config.json"),
        ({"source": "bert", "task": "summarization"}, "task", "unknown task 'summarization'"),
        ({"source": "bert"}, "task", "required for a checkpoint folder"),
        ({"source": "vit", "task": "text-classification"}, "task", "cannot do text-classification"),
        ({"source": "bert", "task": "image-classification"}, "task", "cannot do image-classification"),
    ],
)
def test_a_bad_checkpoint_entry_is_one_line_naming_the_file_and_field(
    checkpoints: Path, entry: dict[str, object], field: str, says: str
) -> None:
    (checkpoints / "empty").mkdir(exist_ok=True)
    spec_file = _spec(checkpoints, {"name": "m", **entry})
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file)
    line = caught.value.one_line()
    assert line.startswith(f"{spec_file}: model 'm': {field}: ") and says in line and "\n" not in line
    if "cannot do" in says:
        assert "config.json" in line


def test_the_build_command_exits_2_on_a_bad_checkpoint(
    checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = _spec(checkpoints, {"name": "m", "source": "vit", "task": "token-classification"})
    repo = tmp_path / "repo"
    assert main(["build", "--spec", str(spec_file), "--repo", str(repo), "--target", "local"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "model 'm': task: " in line and not repo.exists()


def test_init_writes_the_task_config_architectures_name(
    checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert task_of(checkpoints / "ner" / "config.json") is TASKS["token-classification"]
    assert task_of(checkpoints / "bert" / "config.json") is TASKS["feature-extraction"]
    monkeypatch.chdir(checkpoints)
    assert main(["init", "ner"]) == 0
    (entry,) = yaml.safe_load(capsys.readouterr().out)["models"]
    assert entry == {"name": "ner", "source": "ner", "task": "token-classification"}
    masked = tmp_path / "masked"
    shutil.copytree(checkpoints / "bert", masked)
    config = json.loads((masked / "config.json").read_text())
    (masked / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    assert main(["init", str(masked)]) == 2
    assert "architectures: names no single task; give --task" in capsys.readouterr().err
    assert main(["init", str(masked), "--task", "feature-extraction", "--name", "enc"]) == 0
    (entry,) = yaml.safe_load(capsys.readouterr().out)["models"]
    assert entry["task"] == "feature-extraction" and entry["name"] == "enc"


def test_a_config_image_size_of_height_and_width_sizes_the_pixels() -> None:
    """YOLOS's config gives image_size as [height, width]; a processor that keeps the aspect ratio
    names no size, so the config's is the fallback."""
    from types import SimpleNamespace

    from builder.spec.checkpoint import _image_size

    keeps_aspect = SimpleNamespace(size={"shortest_edge": 64, "longest_edge": 96}, crop_size=None)
    assert _image_size(keeps_aspect, SimpleNamespace(image_size=[64, 96])) == (64, 96)
    assert _image_size(keeps_aspect, SimpleNamespace(image_size=32)) == (32, 32)
