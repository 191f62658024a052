"""One writer for the ``vllm_engine`` model folder: what the tests and benchmarks serve
(``write_local_model``) is the folder the build writes for the same spec, file for file."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.llm.serving import EngineArgs, ServingSettings, engine_args
from builder.targets import TARGETS
from builder.targets.vllm_python import serving_settings, write_local_model
from builder.targets.writer import write_entry
from tests.builder.targets.test_lora_entries import LORA, build


def tree(folder: Path) -> dict[str, bytes]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


@pytest.mark.parametrize("lora", [None, LORA])
def test_the_folder_tests_serve_is_the_folder_the_build_writes(
    tmp_path: Path, lora: dict[str, object] | None
) -> None:
    llm = build(tmp_path, lora)
    (entry,) = TARGETS["local"].llm_models(llm)
    write_entry(entry, tmp_path / "built")  # as builder/repository.py writes it
    engine, settings = engine_args(llm.spec, llm.verdict.dtype), serving_settings(llm.spec)
    version = write_local_model(
        tmp_path / "alone" / llm.spec.name, engine, settings, checkpoint=llm.checkpoint, adapters=llm.adapters
    )
    assert version == tmp_path / "alone" / llm.spec.name / "1"
    assert tree(tmp_path / "alone") == tree(tmp_path / "built")
    assert "tiny_llm/1/checkpoint/config.json" in tree(tmp_path / "alone")


def test_without_a_checkpoint_the_engine_names_its_own(tmp_path: Path) -> None:
    engine = EngineArgs(model=str(tmp_path / "elsewhere"))
    version = write_local_model(tmp_path / "chat", engine, ServingSettings(max_waiting=3))
    assert not (version / "checkpoint").exists() and (version / "model.json").is_file()


def test_a_checkpoint_needs_the_engine_to_read_it_from_the_version_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"model 'elsewhere'.*checkpoint"):
        write_local_model(tmp_path / "chat", EngineArgs(model="elsewhere"), checkpoint=tmp_path)
