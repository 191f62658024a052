"""The Python-backend models the builder ships, one package each: ``model.py`` and the modules it
needs, copied whole into a repository's version folder (``<model>/1/``) by ``copy_sources``.

python_backend puts the version folder on ``sys.path`` and imports ``model.py`` as ``<version>.model``,
so a model's modules import each other relatively (``from .utils.lanes import ...``), there as in the
project. They import nothing of the project. A module several models need (a contract shared with
the builder and the clients, a helper) is one file that each package links to, and a package several
need (``shared/runtimes``) one folder; copying follows the links, so the repository holds plain files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

PACKAGES = Path(__file__).parent


def package(name: str) -> Path:
    """The folder of the model package ``name`` (``vllm_engine``, ``onnx_runner``...)."""
    return PACKAGES / name


def model_sources(folder: Path) -> dict[str, Path]:
    """Every module of the model package ``folder``, by its path in the version folder: ``model.py``,
    the modules beside it and those of its subpackages (folders with an ``__init__.py``). Not the
    package's own ``__init__.py``: the version folder is imported as a namespace package. A linked
    subpackage (``runtimes``) is followed like a folder of its own."""
    sources: dict[str, Path] = {}
    found = (Path(top) / name for top, _, names in os.walk(folder, followlinks=True) for name in names)
    for path in sorted(p for p in found if p.suffix == ".py"):
        relative = path.relative_to(folder)
        if relative == Path("__init__.py") or "__pycache__" in relative.parts:
            continue
        parents = [folder / Path(*relative.parts[: i + 1]) for i in range(len(relative.parts) - 1)]
        if all((p / "__init__.py").is_file() for p in parents):
            sources[relative.as_posix()] = path
    return sources


def copy_sources(sources: Mapping[str, Path], version: Path) -> None:
    """Copy ``sources`` (``model_sources``) into ``version``, following links."""
    for name, source in sources.items():
        (version / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, version / name)
