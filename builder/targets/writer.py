"""The one writer of a model folder from its entry: the repository writes every entry with it (core
models, LLMs, Python models, ensembles), and tests and benchmarks that serve an LLM alone write
theirs with it too (``vllm_python``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from builder.configs import write_config
from builder.python_models import copy_sources
from builder.targets.base import ModelEntry


def write_entry(entry: ModelEntry, root: Path) -> Path:
    """``root/<name>``: config and labels files, version folder with artifacts (linked), sources
    (copied), the spec's files (linked) and the generated texts; returns the version folder."""
    model_dir = root / entry.name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    for name, src in entry.artifacts.items():
        (version / name).parent.mkdir(parents=True, exist_ok=True)
        link(src, version / name)
    copy_sources(entry.sources, version)
    for name, src in entry.files.items():
        link(src, version / name)
    for name, text in entry.texts.items():
        (version / name).write_text(text, encoding="utf-8")
    write_config(entry.config, model_dir)
    for name, text in entry.labels.items():
        (model_dir / name).write_text(text, encoding="utf-8")
    return version


def link(src: str | Path, dst: str | Path) -> None:
    """Hard-link cache artifacts into the repository (they are immutable); copy across devices."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path, *, rewritten: str | None = None) -> None:
    """A built repository (or a model of it) copied by hard links (tune, plans); ``rewritten``, a
    file the caller writes anew, is left out so that nothing is written through a link."""
    shutil.copytree(src, dst, copy_function=link, dirs_exist_ok=True)
    if rewritten is not None:
        (dst / rewritten).unlink()
