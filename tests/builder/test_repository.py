"""The repository writer: every model folder, Python models and ensembles too, is an entry written by
the one writer (``builder.targets.writer.write_entry``), with the labels and files the spec names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from builder import repository
from builder.cache import StageCache
from builder.errors import SpecError
from builder.records import BuildContext
from builder.repository import Repository
from builder.spec import load_spec
from builder.targets import TARGETS, ModelEntry
from builder.targets.writer import write_entry

TENSOR = {"name": "y", "dtype": "FP32", "dims": [10]}


def project(tmp_path: Path, tiny_project: Path, post_name: str = "post") -> BuildContext:
    """The tiny project with a Python model (its own code, a ``files:`` entry, labelled output) and
    an ensemble of the two."""
    spec = yaml.safe_load((tiny_project / "models.yaml").read_text())
    (tiny_project / "post").mkdir()
    (tiny_project / "post" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (tiny_project / "vocab.txt").write_text("v\n")
    (tiny_project / "labels.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n")
    labelled = {**TENSOR, "labels": "labels.txt"}
    spec["python_models"] = [{"name": post_name, "path": "post", "inputs": [TENSOR], "outputs": [labelled],
                              "max_batch_size": 8, "files": ["vocab.txt"]}]  # fmt: skip
    steps = [{"model": "tiny", "inputs": {"x": "x"}, "outputs": {"y": "mid"}},
             {"model": post_name, "inputs": {"y": "mid"}, "outputs": {"y": "y"}}]  # fmt: skip
    x = {"name": "x", "dtype": "FP32", "dims": [16]}
    spec["ensembles"] = [{"name": "pipeline", "inputs": [x], "outputs": [labelled], "max_batch_size": 8,
                          "steps": steps}]  # fmt: skip
    spec_file = tiny_project / "models.yaml"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    return BuildContext(
        load_spec(spec_file), spec_file, tiny_project, StageCache(tmp_path / "cache", print), print
    )


def test_python_models_and_ensembles_go_through_the_one_writer(
    tmp_path: Path, tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[ModelEntry] = []

    def recording(entry: ModelEntry, root: Path) -> Path:
        written.append(entry)
        return write_entry(entry, root)

    monkeypatch.setattr(repository, "write_entry", recording)
    ctx, root = project(tmp_path, tiny_project), tmp_path / "repo"
    manifest = repository._assemble(Repository([], ctx, TARGETS["local"], None, []), root)
    assert [e.name for e in written] == ["post", "pipeline"]
    assert manifest["models"] == {
        "post": {"kind": "python"},
        "pipeline": {"kind": "ensemble", "steps": ["tiny", "post"]},
    }
    version = root / "post" / "1"
    assert (version / "model.py").is_file() and os.path.samefile(
        version / "vocab.txt", tiny_project / "vocab.txt"
    )
    for model in ("post", "pipeline"):
        assert (root / model / "labels.txt").read_text() == (tiny_project / "labels.txt").read_text()
    assert not any((root / "pipeline" / "1").iterdir())  # an ensemble's version folder is empty


def test_a_model_named_as_a_published_variant_is_refused_not_merged(
    tmp_path: Path, tiny_project: Path
) -> None:
    ctx, root = project(tmp_path, tiny_project, post_name="tiny_fp16"), tmp_path / "repo"
    (root / "tiny_fp16").mkdir(parents=True)  # the core model's fp16 variant, written first
    with pytest.raises(SpecError, match="model 'tiny_fp16': two of the spec's models would be published"):
        repository._assemble(Repository([], ctx, TARGETS["local"], None, []), root)


def test_the_repository_key_holds_the_code_of_every_module_that_writes_a_folder() -> None:
    from builder.stages.code import ROOT, closure

    covered = {path.relative_to(ROOT).as_posix() for path in closure(repository.WRITERS)}
    writers = [
        "builder/repository.py",  # the manifest, labels, a Python model's files, the ensembles
        "builder/targets/writer.py",  # every model folder
        "builder/targets/base.py",  # ModelEntry
        "builder/targets/vllm_python.py",  # an LLM's folder, either server's
        "builder/targets/gpu.py",
        "builder/llm/serving.py",  # model.json, multi_lora.json, the vllm_engine config
        "builder/llm/gpu.py",  # Triton's vLLM backend's config and engine arguments
        "builder/configs.py",
        "builder/python_models/__init__.py",  # the copied code
        "builder/publish.py",
    ]
    assert [w for w in writers if w not in covered] == []
