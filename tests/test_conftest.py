"""How `make test` splits the tests between its processes, where servers and engines may
start, what it reports and what it cleans up after itself (tests/conftest.py, tests/engines.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.server import TritonServer
from tests.conftest import (
    ENGINE_RUNNER,
    peak_line,
    pytest_xdist_make_scheduler,
    server_refusal,
    too_many_engines,
)
from tests.engines import (
    ENGINE_GROUP,
    ENGINES_AT_ONCE,
    GROUPS_ENV,
    PHASES,
    ZOO_BUILT_ENV,
    SharedServers,
    group_of,
    module_asks,
    module_of,
    own_group,
    starts_engine,
    write_groups,
)
from tests.process_tree import Peaks, Proc, Sampler, descendants, parents


def test_each_module_is_one_group_and_every_engine_user_is_in_the_engine_group(
    request: pytest.FixtureRequest,
) -> None:
    """Over the tests this run collected: every test carries its xdist group, a module's tests share
    one, and those using a fixture that starts an engine, or whose module takes from the LLM
    repository helpers, are in ENGINE_GROUP."""
    groups: dict[str, set[str]] = {}
    for item in request.session.items:
        assert item.get_closest_marker("xdist_group") is not None, item.nodeid
        groups.setdefault(module_of(item.nodeid), set()).add(group_of(item))
        assert not starts_engine(item) or group_of(item) == ENGINE_GROUP, item.nodeid
    assert {m: g for m, g in groups.items() if len(g) > 1} == {}
    assert groups["tests/test_conftest.py"] == {"tests/test_conftest.py"}


def test_a_build_of_models_yaml_starts_engines_only_while_the_zoo_was_not_built_first(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert own_group(request.node) == "tests/test_conftest.py"
    request.node.add_marker(pytest.mark.llm_build)
    monkeypatch.delenv(ZOO_BUILT_ENV, raising=False)
    assert own_group(request.node) == ENGINE_GROUP
    monkeypatch.setenv(ZOO_BUILT_ENV, "1")
    assert own_group(request.node) == "tests/test_conftest.py"


def test_the_zoo_repositorys_readers_start_engines_only_while_the_zoo_was_not_built_first(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(request.node, "fixturenames", [*request.node.fixturenames, "zoo_repo"])
    monkeypatch.delenv(ZOO_BUILT_ENV, raising=False)
    assert starts_engine(request.node)
    monkeypatch.setenv(ZOO_BUILT_ENV, "1")
    assert not starts_engine(request.node)
    monkeypatch.setattr(request.node, "fixturenames", [*request.node.fixturenames, "triton"])
    assert starts_engine(request.node)


def test_the_scheduler_reads_each_tests_group_from_the_workers_file(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    groups = tmp_path / "groups.json"
    write_groups(request.session.items, groups)
    monkeypatch.setattr(pytestconfig.option, "tx", ["popen", "popen"], raising=False)
    monkeypatch.setattr(pytestconfig.option, "dist", "load", raising=False)
    assert pytest_xdist_make_scheduler(pytestconfig, log=None) is None  # xdist's own choice
    monkeypatch.setattr(pytestconfig.option, "dist", "loadgroup")
    monkeypatch.setenv(GROUPS_ENV, str(groups))
    scope = pytest_xdist_make_scheduler(pytestconfig, log=None)._split_scope
    assert {scope(item.nodeid) for item in request.session.items} == {
        group_of(item) for item in request.session.items
    }
    assert all(scope(item.nodeid) == group_of(item) for item in request.session.items)


def test_the_engine_group_runs_its_modules_whole_and_in_phase_order(request: pytest.FixtureRequest) -> None:
    """The zoo server's users, then both servers', then the LLM server's, then engines of their own:
    each shared server starts once."""
    modules: list[str] = []
    for item in request.session.items:
        if group_of(item) == ENGINE_GROUP:
            module = module_of(item.nodeid)
            if not modules or modules[-1] != module:
                assert module not in modules, f"{module} runs in two parts"
                modules.append(module)
    asked = module_asks(request.session.items)
    phases = [PHASES[asked[m]] for m in modules]
    assert phases == sorted(phases)


class Recorded:
    """A shared server's stand-in for the pool: what was stopped."""

    def __init__(self, name: str, stopped: list[str]) -> None:
        self.name, self.stopped = name, stopped

    def stop(self) -> None:
        self.stopped.append(self.name)


def test_shared_servers_start_once_stay_while_held_and_make_room_when_asked() -> None:
    stopped: list[str] = []
    starts: list[str] = []

    def start(name: str):  # type: ignore[no-untyped-def]
        return lambda: starts.append(name) or Recorded(name, stopped)

    pool = SharedServers()
    with pool.hold("zoo", start("zoo")) as first, pool.hold("zoo", start("zoo")) as again:
        assert first is again and starts == ["zoo"]
        pool.make_room(keep=set())
        assert stopped == []  # held
    with pool.hold("llm", start("llm")):
        pool.make_room(keep={"zoo"})
        assert stopped == []  # asked for by the test
        pool.make_room(keep=set())
        assert stopped == ["zoo"]  # neither held nor asked for
    with pool.hold("zoo", start("zoo")):
        assert starts == ["zoo", "llm", "zoo"]
    pool.stop_all()
    assert sorted(stopped) == ["llm", "zoo", "zoo"] and pool.running() == []


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


def test_an_engine_outside_the_engine_group_is_refused(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    request.node.add_marker(pytest.mark.integration)
    repo = engine_repo(tmp_path / "repo")
    refusal = server_refusal(request.node, TritonServer(repo))
    assert refusal is not None and "mark its module pytest.mark.xdist_group(ENGINE_GROUP)" in refusal
    assert (
        server_refusal(request.node, TritonServer(repo, model_control="explicit", load_models=["a"])) is None
    )
    assert server_refusal(request.node, TritonServer(tmp_path / "no_llm")) is None  # a server, no engine


def test_a_builds_vllm_child_outside_the_engine_group_is_refused_before_it_starts(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"a build's verification\): mark its module"):
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
