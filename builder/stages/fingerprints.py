"""Fingerprints of what a user brings that a stage's key must change with: the code of a factory or
reader module (and the spec folder's modules it imports), and a data set with its reader."""

from __future__ import annotations

import importlib.util
import modulefinder
from pathlib import Path
from typing import IO, Any

from builder.cache import file_hash, key_of, tree_hash
from builder.spec import DataSpec


def module_fingerprint(ref: str, spec_dir: Path) -> str:
    """Hash of the module defining ``pkg.mod:fn`` and of every module it imports from the
    spec's folder (found without importing anything)."""
    module = ref.partition(":")[0]
    root = spec_dir.resolve()
    origin = _module_file(module, root)
    if origin is None:
        return f"unresolved:{module}"
    finder = _Finder(path=[str(root)])
    try:
        finder.import_hook(module)
    except (ImportError, SyntaxError):
        return file_hash(origin)
    found = (getattr(m, "__file__", None) for m in finder.modules.values())
    files = {origin} | {Path(f) for f in found if f}
    local = sorted(f for f in files if f.is_file() and f.resolve().is_relative_to(root))
    return key_of([(str(f.resolve().relative_to(root)), file_hash(f)) for f in local])


class _Finder(modulefinder.ModuleFinder):
    """A ModuleFinder for which a folder without ``__init__.py`` (a namespace package, which
    Python 3.11's finder fails on with an AttributeError) is a module it cannot find, as for
    any other import from outside the spec folder."""

    def find_module(
        self, name: str, path: str | None, parent: modulefinder.Module | None = None
    ) -> tuple[IO[Any] | None, str | None, tuple[str, str, int]]:
        try:
            return super().find_module(name, path, parent)
        except AttributeError as exc:  # the found spec has no loader
            raise ImportError(f"namespace package {name}") from exc


def _module_file(module: str, root: Path) -> Path | None:
    path = root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(found.origin) if found and found.origin and Path(found.origin).is_file() else None


def data_fingerprint(data: DataSpec, spec_dir: Path) -> str:
    parts: list[str] = []
    if data.data is not None:
        path = spec_dir / data.data
        parts.append(tree_hash(path) if path.exists() else "missing")
    if data.reader is not None:
        parts.append(module_fingerprint(data.reader, spec_dir))
    return key_of(parts, data.max_samples)
