"""builder.sources.checkpoint: a checkpoint is keyed by its task and its folder's files; ``init``
reads only a folder (the checkpoint's export and reference: tests/builder/stages/test_checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import SpecError
from builder.sources.base import InitRequest
from builder.sources.checkpoint import CheckpointSource
from tests.builder.sources.entries import model

SOURCE = CheckpointSource()


def test_the_fingerprint_follows_the_task_and_the_folder(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    text = model("ckpt", task="text-classification")
    tokens = model("ckpt", task="token-classification")
    before = SOURCE.fingerprint(text, tmp_path)
    assert SOURCE.fingerprint(tokens, tmp_path) != before
    (tmp_path / "ckpt" / "config.json").write_text('{"edited": 1}')
    assert SOURCE.fingerprint(text, tmp_path) != before
    SOURCE.check_paths(text, tmp_path, tmp_path / "models.yaml")  # read when the spec was loaded


def test_init_reads_only_a_checkpoint_folder(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    (tmp_path / "m.onnx").write_bytes(b"")
    assert SOURCE.init_entry(tmp_path / "m.onnx", InitRequest(), spec_file) is None
    with pytest.raises(SpecError, match=r"no config\.json"):
        SOURCE.init_entry(tmp_path, InitRequest(), spec_file)
