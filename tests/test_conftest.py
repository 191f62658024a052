"""How `make test` splits the tests between its two processes, and what it cleans up after
itself (tests/conftest.py)."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from tests.conftest import (
    ENGINE_MODULES,
    ENGINE_SCOPE,
    ROOT,
    _module,
    _starts_engine,
    orphaned_shm,
    pytest_xdist_make_scheduler,
)


def test_every_engine_module_exists() -> None:
    assert sorted(m for m in ENGINE_MODULES if not (ROOT / m).is_file()) == []


def test_every_module_that_starts_an_engine_is_listed(request: pytest.FixtureRequest) -> None:
    """Over the tests this run collected: those using a fixture that starts an engine, or whose
    module takes from the LLM repository helpers, belong to ENGINE_MODULES."""
    starting = {_module(item.nodeid) for item in request.session.items if _starts_engine(item)}
    assert sorted(starting - ENGINE_MODULES) == [], "add them to ENGINE_MODULES in tests/conftest.py"


def test_engine_modules_share_one_scope_and_the_others_keep_their_own(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pytestconfig.option, "tx", ["popen", "popen"], raising=False)
    monkeypatch.setattr(pytestconfig.option, "dist", "load", raising=False)
    assert pytest_xdist_make_scheduler(pytestconfig, log=None) is None  # xdist's own choice
    monkeypatch.setattr(pytestconfig.option, "dist", "loadscope")
    scope = pytest_xdist_make_scheduler(pytestconfig, log=None)._split_scope
    assert scope("tests/integration/test_llm_lora.py::test_x") == ENGINE_SCOPE
    assert scope("tests/clients/test_client.py::test_y[grpc]") == ENGINE_SCOPE
    assert scope("tests/builder/test_cache.py::test_z") == "tests/builder/test_cache.py"


def test_only_new_shared_memory_no_process_maps_is_orphaned(tmp_path: Path) -> None:
    for name in ("psm_old", "psm_in_use", "psm_left", "triton_python_backend_shm_region_x", "other"):
        (tmp_path / name).write_bytes(b"\0" * 4096)
    with (tmp_path / "psm_in_use").open("r+b") as f, mmap.mmap(f.fileno(), 4096):
        found = orphaned_shm({"psm_old"}, tmp_path)
    assert found == {"psm_left", "triton_python_backend_shm_region_x"}
