"""For the models that load a tokenizer through transformers: they link to this one file. It
imports nothing of the project."""

from __future__ import annotations

import sys


def without_torch() -> None:
    """Marks torch absent before transformers is imported: a tokenizer needs none, and transformers
    imports an installed torch (seconds and hundreds of MB in every model instance). The serving
    image has no torch either. Only the Triton model calls it, never a process that uses torch."""
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]  # None: "not importable"
