"""The Python-backend models the builder ships, one package each: ``model.py`` and the modules it
needs, copied whole into a repository's version folder (``<model>/1/``) by ``copy_sources``.

python_backend puts the version folder on ``sys.path`` and imports ``model.py`` as ``<version>.model``,
so a model's modules import each other relatively (``from .utils.lanes import ...``), there as in the
project. They import nothing of the project. A module several models need (a contract shared with
the builder and the clients, a helper) is one file that each package links to; copying follows the
link, so the repository holds a plain file.
"""

from __future__ import annotations

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
    package's own ``__init__.py``: the version folder is imported as a namespace package."""
    sources: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
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
