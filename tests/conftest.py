"""Shared test helpers: a copy of a small project to build, and repository snapshots."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "builder" / "fixtures"


def tree_digest(root: Path) -> str:
    """Names, modes and contents of every file under root: equal digests = byte-for-byte equal."""
    digest = hashlib.sha256()
    for item in sorted(root.rglob("*")):
        digest.update(str(item.relative_to(root)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A fresh copy of the tiny project (spec, factory module, data) in tmp_path."""
    project = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "tiny", project)
    sys.path.insert(0, str(project))
    from tinyzoo import make_data  # type: ignore[import-not-found]

    make_data(project / "data")
    sys.path.remove(str(project))
    return project
