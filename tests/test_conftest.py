"""How `make test` splits the tests between its two processes, and what it cleans up after
itself (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import (
    ENGINE_MODULES,
    ENGINE_SCOPE,
    ROOT,
    _module,
    _starts_engine,
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
