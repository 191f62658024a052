"""How `make test` splits the tests between its two processes, where servers and engines may
start, what it reports and what it cleans up after itself (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.server import TritonServer
from tests.conftest import (
    ENGINE_MODULES,
    ENGINE_RUNNER,
    ENGINE_SCOPE,
    ENGINES_AT_ONCE,
    ROOT,
    _module,
    _starts_engine,
    peak_line,
    pytest_xdist_make_scheduler,
    server_refusal,
    too_many_engines,
)
from tests.process_tree import Peaks, Proc, Sampler, descendants, parents


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


def test_a_test_without_the_markers_cannot_start_a_server(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="starts a tritonserver: mark it integration"):
        TritonServer(tmp_path).start(timeout=1)  # refused before any process starts


def engine_repo(root: Path) -> Path:
    """A repository whose 'llm' is a local-target vLLM model (what the check looks for)."""
    version = root / "llm" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("")
    (version / "model.json").write_text("{}")
    return root


def test_an_engine_outside_engine_modules_is_refused(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    request.node.add_marker(pytest.mark.integration)
    repo = engine_repo(tmp_path / "repo")
    refusal = server_refusal(request.node, TritonServer(repo))
    assert refusal is not None and "add tests/test_conftest.py to ENGINE_MODULES" in refusal
    assert (
        server_refusal(request.node, TritonServer(repo, model_control="explicit", load_models=["a"])) is None
    )
    assert server_refusal(request.node, TritonServer(tmp_path / "no_llm")) is None  # a server, no engine


def test_a_builds_vllm_child_outside_engine_modules_is_refused_before_it_starts(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"a build's verification\): add tests/test_conftest\.py"):
        subprocess.Popen([sys.executable, "-m", ENGINE_RUNNER, str(tmp_path / "request.json")])
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # any other child starts


def proc(pid: int, ppid: int, cmdline: str, mib: int = 100) -> Proc:
    return Proc(pid, ppid, mib << 20, cmdline)


def test_peaks_sum_the_tree_and_name_what_started_each_engine() -> None:
    assert sorted(descendants({2: 1, 3: 2, 4: 1, 5: 9}, 1)) == [1, 2, 3, 4]
    peaks = Peaks()
    stub = "triton_python_backend_stub /tmp/pytest-of-ci/lanes0/repo/smollm2/1/model.py"
    peaks.add(
        [proc(1, 0, "pytest"), proc(2, 1, "tritonserver"), proc(3, 2, stub), proc(4, 3, "VLLM::EngineCore")]
    )
    peaks.add([proc(1, 0, "pytest", mib=50)])
    assert peaks.rss == 400 << 20 and peaks.engines == 1 and peaks.engines_seen == [stub]
    assert "0.4 GiB resident" in peak_line(peaks) and f"at once: 1 (at most {ENGINES_AT_ONCE})" in peak_line(
        peaks
    )
    many = Peaks(engines=ENGINES_AT_ONCE + 1, engines_seen=[stub] * (ENGINES_AT_ONCE + 1))
    assert f"{ENGINES_AT_ONCE + 1} vLLM engines were up at once" in too_many_engines(many)


def test_the_sampler_counts_a_child_process() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        sampler = Sampler(os.getpid())
        assert child.pid in descendants(parents(), os.getpid())
        sampler.sample()
        assert sampler.peaks.rss > 0 and sampler.peaks.engines == 0
    finally:
        child.kill()
        child.wait()
