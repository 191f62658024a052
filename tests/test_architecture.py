"""The layers written in pyproject.toml hold, and each contract fails on a planted violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT)], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_every_contract() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arch")
    for package in ("builder", "clients"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("builder/spec/__init__.py", "import builder.pipeline", "builder layers"),
        ("builder/records.py", "from builder import targets", "builder layers"),
        ("builder/engines/build.py", "import builder.repository", "builder layers"),
        ("clients/model.py", "import builder.spec", "clients ship alone"),
        (
            "builder/python_models/onnx_runner/model.py",
            "import builder.errors",
            "Python-backend models import nothing",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(copy: Path, module: str, planted: str, contract: str) -> None:
    path = copy / module
    original = path.read_text()
    path.write_text(original + f"\n{planted}  # planted\n")
    try:
        result = lint(copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout[-3000:]
