"""builder.sources.onnx_file: an .onnx file is checked before the stages, keyed by its bytes, and
its own reference; ``tritonforge init`` reads an entry from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cache import file_hash
from builder.errors import SpecError
from builder.sources.base import InitRequest
from builder.sources.onnx_file import OnnxFileSource
from tests.builder.fixtures import foreign_onnx as f
from tests.builder.sources.entries import model

SOURCE = OnnxFileSource()


def test_a_missing_file_is_one_line_naming_the_source_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        SOURCE.check_paths(model("missing.onnx"), tmp_path, tmp_path / "models.yaml")
    assert err.value.field == "source" and err.value.model == "m"
    assert "ONNX file 'missing.onnx' not found" in str(err.value)


def test_the_fingerprint_is_the_files_hash(tmp_path: Path) -> None:
    f.save(f.conv_graph(11), tmp_path / "m.onnx")
    SOURCE.check_paths(model("m.onnx"), tmp_path, tmp_path / "models.yaml")
    assert SOURCE.fingerprint(model("m.onnx"), tmp_path) == file_hash(tmp_path / "m.onnx")
    assert SOURCE.load(model("m.onnx"), tmp_path, tmp_path / "models.yaml") == tmp_path / "m.onnx"


def test_the_exported_graph_is_the_reference(tmp_path: Path) -> None:
    log = tmp_path / "reference.log"
    assert SOURCE.reference(model("m.onnx"), {}, spec_dir=tmp_path, spec_file=tmp_path, log=log) is None
    assert not log.exists()


def test_init_reads_only_an_onnx_file(tmp_path: Path) -> None:
    f.save(f.conv_graph(11), tmp_path / "Conv Net.onnx")
    spec_file = tmp_path / "models.yaml"
    assert SOURCE.init_entry(tmp_path, InitRequest(), spec_file) is None
    assert SOURCE.init_entry(tmp_path / "m.pt", InitRequest(), spec_file) is None
    entry = SOURCE.init_entry(tmp_path / "Conv Net.onnx", InitRequest(name="conv"), spec_file)
    assert entry is not None and entry["name"] == "conv" and entry["source"] == "Conv Net.onnx"
    assert entry["precisions"] == ["fp32", "fp16"]
