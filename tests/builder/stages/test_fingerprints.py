"""The fingerprints of a user's factory or reader module and data (builder/stages/fingerprints.py)."""

from __future__ import annotations

from pathlib import Path

from builder.stages.fingerprints import module_fingerprint


def test_factory_fingerprint_covers_modules_it_imports_from_the_spec_folder(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 4\n")
    (tmp_path / "pkg" / "model.py").write_text(
        "from pkg.layers import WIDTH\n\ndef build():\n    return WIDTH\n"
    )
    (tmp_path / "unrelated.py").write_text("X = 1\n")
    before = module_fingerprint("pkg.model:build", tmp_path)
    (tmp_path / "unrelated.py").write_text("X = 2\n")
    assert module_fingerprint("pkg.model:build", tmp_path) == before
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 8\n")
    assert module_fingerprint("pkg.model:build", tmp_path) != before


def test_a_folder_without_init_in_the_spec_folder_does_not_stop_the_fingerprint(tmp_path: Path) -> None:
    """A spec folder holding, say, ``builder/python_models/`` beside a factory importing the
    installed ``builder`` package: Python's module finder fails on such a namespace package."""
    (tmp_path / "builder" / "python_models").mkdir(parents=True)
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "layers.py").write_text("WIDTH = 4\n")
    (tmp_path / "zoo" / "model.py").write_text(
        "from builder.errors import DataError\n"
        "from zoo.layers import WIDTH\n\ndef build():\n    return WIDTH\n"
    )
    before = module_fingerprint("zoo.model:build", tmp_path)
    (tmp_path / "zoo" / "layers.py").write_text("WIDTH = 8\n")
    assert module_fingerprint("zoo.model:build", tmp_path) != before
