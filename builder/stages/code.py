"""The code that makes a stage's artifact, as a fingerprint for the stage's cache key.

A stage names the modules that make its artifact (``StageInputs.CODE``); the fingerprint hashes
their files and those of every project module they import, at the top or inside a function (read
from the source with ``ast``, nothing imported), with the packages' ``__init__`` files that run on
import. Editing ``builder/stages/quantize.py`` then reruns the INT8 stages and no other; the stages
after it rerun only where the artifact they read changed.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

PROJECT = "builder"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding the builder package


def read_source(path: Path) -> bytes:
    return path.read_bytes()


@cache
def code_fingerprint(modules: tuple[str, ...]) -> str:
    """A hash of the files of ``modules`` and of every project module they import."""
    digest = hashlib.sha256()
    for path in sorted(closure(modules)):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(hashlib.sha256(read_source(path)).digest())
    return digest.hexdigest()[:20]


def closure(modules: tuple[str, ...]) -> set[Path]:
    """The files of ``modules`` (every module of a package) and of the project modules they
    import, transitively."""
    todo = [f for name in modules for f in _files(name, whole_package=True)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            todo += _files(name, whole_package=False)
    return seen


def _files(name: str, *, whole_package: bool) -> list[Path]:
    """The file of module ``name`` and the ``__init__`` files of its packages; a package's
    every module where ``whole_package``; nothing for a name that is not a project module."""
    if name.split(".")[0] != PROJECT:
        return []
    parts = name.split(".")
    inits = [ROOT.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    base = ROOT.joinpath(*parts)
    if base.is_dir():
        own = sorted(base.rglob("*.py")) if whole_package else [base / "__init__.py"]
    elif base.with_suffix(".py").is_file():
        own = [base.with_suffix(".py")]
    else:
        return []
    return [f for f in [*inits, *own] if f.is_file()]


def _imports(path: Path) -> list[str]:
    """The project modules ``path`` imports; ``from a import b`` names both ``a`` and ``a.b``
    (``b`` may be a module or a name in ``a``: a name resolves to no file)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(read_source(path), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return [name for name in names if name.split(".")[0] == PROJECT]
