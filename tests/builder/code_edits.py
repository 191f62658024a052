"""Editing the project's code as the cache keys read it: the tree itself is never touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.stages import code
from builder.stages.code import ROOT, code_fingerprint


class CodeEdits:
    """Edits of project files (paths relative to the repository root), one after the other,
    seen by every code fingerprint computed after them; leaving the ``with`` forgets the
    fingerprints computed under them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.edits: list[tuple[str, str, str]] = []
        real = code.read_source

        def read(path: Path) -> bytes:
            text = real(path)
            for file, old, new in self.edits:
                if file == str(path.relative_to(ROOT)):
                    assert old.encode() in text, f"{path}: nothing to edit"
                    text = text.replace(old.encode(), new.encode(), 1)
            return text

        monkeypatch.setattr(code, "read_source", read)
        code_fingerprint.cache_clear()

    def __enter__(self) -> CodeEdits:
        return self

    def __exit__(self, *_: object) -> None:
        code_fingerprint.cache_clear()

    def comment(self, file: str) -> None:
        """A comment added at the end of ``file``."""
        text = (ROOT / file).read_text()
        self.replace(file, text[-40:], text[-40:] + "\n# edited\n")

    def replace(self, file: str, old: str, new: str) -> None:
        self.edits.append((file, old, new))
        code_fingerprint.cache_clear()
