"""Each Python-backend model is a package copied whole into its version folder, the modules it shares
(a contract, a helper) landing there as plain files; the copy imports as python_backend imports it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from builder.llm.serving import EngineArgs
from builder.python_models import PACKAGES, copy_sources, model_sources, package
from builder.targets.vllm_python import write_local_model

ROOT = Path(__file__).resolve().parents[3]
MODELS = sorted(p.name for p in PACKAGES.iterdir() if (p / "model.py").is_file())


def test_a_package_is_its_model_its_modules_and_its_subpackages(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    for name in ("__init__.py", "model.py", "helper.py", "sub/__init__.py", "sub/part.py", "notes/x.py"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "model.py").write_text("")
    assert sorted(model_sources(folder)) == ["helper.py", "model.py", "sub/__init__.py", "sub/part.py"]


def test_vllm_engine_lands_whole_with_its_contract_as_a_plain_file(tmp_path: Path) -> None:
    version = write_local_model(tmp_path / "chat", EngineArgs(model="checkpoint"))
    shipped = {p.relative_to(version).as_posix() for p in version.rglob("*.py")}
    assert shipped == set(model_sources(package("vllm_engine")))
    assert {"model.py", "contract.py", "utils/__init__.py", "utils/lanes.py"} <= shipped
    contract = version / "contract.py"
    assert not contract.is_symlink()
    assert contract.read_text() == (ROOT / "clients" / "vllm_engine_contract.py").read_text()


@pytest.mark.parametrize("name", MODELS)
def test_every_shared_module_is_a_link_to_one_file_of_the_project(name: str) -> None:
    for path in model_sources(package(name)).values():
        if path.is_symlink():
            target = path.resolve()
            assert target.is_file() and target.is_relative_to(ROOT), path
            assert not target.is_relative_to(package(name).resolve()), path


def test_the_copied_package_imports_as_python_backend_imports_it(tmp_path: Path) -> None:
    """python_backend imports ``<version>.model`` with the model folder on sys.path; the parsing
    helpers need neither Triton nor vLLM, so the copy must import here as it does there."""
    version = tmp_path / "smollm2" / "1"
    copy_sources(model_sources(package("vllm_engine")), version)
    code = (
        f"import sys; sys.path[:0] = [{str(version)!r}, {str(version.parent)!r}]; "
        "import importlib; m = importlib.import_module('1.model'); "
        "print(m.parse_lanes('')[0].name, m.REFUSED)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["default", "engine", "is", "full"]


def test_builder_model_and_clients_read_one_contract() -> None:
    from builder.python_models.vllm_engine import contract
    from clients import errors, vllm_engine_contract

    assert Path(contract.__file__).resolve() == Path(vllm_engine_contract.__file__).resolve()
    assert isinstance(
        errors.translate(RuntimeError(f"{contract.REFUSED}: 4 in flight")), errors.RequestRejected
    )
    assert importlib.import_module("builder.python_models.vllm_engine.model").REFUSED is contract.REFUSED
