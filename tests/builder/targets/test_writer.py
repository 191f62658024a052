"""The one writer of a model folder (``write_entry``): whatever the entry serves, its config, its
version folder (built files and the spec's files linked, code copied, generated texts) and the
labels files beside the config."""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.targets.base import ModelEntry
from builder.targets.writer import write_entry


def test_every_part_of_an_entry_lands_where_triton_reads_it(tmp_path: Path) -> None:
    built, user, code = tmp_path / "model.onnx", tmp_path / "vocab.txt", tmp_path / "model.py"
    built.write_bytes(b"graph")
    user.write_text("a\nb\n")
    code.write_text("print('hi')\n")
    entry = ModelEntry(
        ModelConfig(name="m", backend="python"),
        artifacts={"sub/model.onnx": built},
        sources={"model.py": code},
        texts={"settings.json": "{}\n"},
        files={"vocab.txt": user},
        labels={"labels.txt": "cat\ndog\n"},
    )
    version = write_entry(entry, tmp_path / "repo")
    assert version == tmp_path / "repo" / "m" / "1"
    assert text_format.Parse((version.parent / "config.pbtxt").read_text(), ModelConfig()) == entry.config
    assert (version.parent / "labels.txt").read_text() == "cat\ndog\n"  # beside the config
    assert os.path.samefile(version / "sub" / "model.onnx", built)  # linked, not copied
    assert os.path.samefile(version / "vocab.txt", user)
    assert (version / "model.py").read_text() == "print('hi')\n" and not os.path.samefile(
        version / "model.py", code
    )
    assert (version / "settings.json").read_text() == "{}\n"


def test_an_entry_with_nothing_in_its_version_folder_gets_an_empty_one(tmp_path: Path) -> None:
    version = write_entry(ModelEntry(ModelConfig(name="ens", platform="ensemble")), tmp_path)
    assert version.is_dir() and not any(version.iterdir())
    assert sorted(p.name for p in (tmp_path / "ens").iterdir()) == ["1", "config.pbtxt"]
