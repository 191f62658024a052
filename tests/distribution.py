"""What the tests of the project's own distributions share (tests/clients/test_distribution.py,
tests/openai_frontend/test_distribution.py): a package's imports of the project, and a fresh
virtual environment holding wheels built from its folders and their dependencies, nothing else."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Wheels of the distributions' dependencies, kept between runs so that only the first run downloads them.
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonforge" / "client-wheels"
NOT_SHIPPED = ("builder", "tests", "bench", "zoo")  # what a distribution of the project must not import


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def assert_imports_nothing_unshipped(package: Path) -> None:
    """No module of ``package`` (more than ten of them) imports what the distribution lacks."""
    files = sorted(package.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        bad = {m for m in imported_modules(path) if m.split(".")[0] in NOT_SHIPPED}
        assert not bad, f"{path.relative_to(package.parent)} imports {sorted(bad)}"


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


def wheelhouse(requirements: list[str]) -> Path:
    """The dependencies' wheels: from the kept wheelhouse when complete, else downloaded into it."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    offline = pip(
        "download", "--no-index", "--find-links", str(WHEELHOUSE), "-d", str(WHEELHOUSE), *requirements
    )
    if offline.returncode != 0:
        online = pip("download", "-d", str(WHEELHOUSE), *requirements)
        assert online.returncode == 0, online.stderr[-3000:]
    return WHEELHOUSE


def venv_with(work: Path, folders: list[Path], requirements: list[str]) -> Path:
    """The python of a fresh venv under ``work`` (not even pip in it) holding one wheel built from
    each of ``folders`` (``tritonforge_*``) and ``requirements`` from the wheelhouse."""
    for folder in folders:
        # A copy: building writes build/ and *.egg-info beside the sources.
        source = work / "src" / folder.name
        shutil.copytree(folder, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        built = pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source))
        assert built.returncode == 0, built.stderr[-3000:]
    wheels = sorted(str(p) for p in (work / "dist").glob("tritonforge_*.whl"))
    assert len(wheels) == len(folders), wheels
    found = wheelhouse(requirements)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = pip("--python", str(python), "install", "--no-index", "--find-links", str(found), *wheels)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python
