"""Shared test helpers: a copy of a small project to build, and repository snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
# Figures the tests record (bench.reliability.record) go to an ignored folder: only
# `python -m bench.reliability` writes the tracked bench/results/. Set before bench is imported.
os.environ.setdefault("TRITONFORGE_RESULTS_DIR", str(ROOT / ".tritonforge" / "test-results"))

from builder import shared_memory  # noqa: E402
from builder.pipeline import build  # noqa: E402
from builder.records import BuildOptions  # noqa: E402
from builder.server import TritonServer  # noqa: E402
from builder.targets.writer import link_tree  # noqa: E402
from tests.engines import (  # noqa: E402
    ENGINE_GROUP,
    ENGINES_AT_ONCE,
    GROUPS_ENV,
    LLM,
    ZOO,
    ZOO_BUILT_ENV,
    GroupScheduling,
    SharedServers,
    assign_groups,
    group_of,
    module_of,
    write_groups,
)
from tests.process_tree import Peaks, Sampler, breakdown  # noqa: E402

FIXTURES = Path(__file__).parent / "builder" / "fixtures"
KEPT_LOGS = ROOT / ".tritonforge" / "test-logs"
ZOO_START_TIMEOUT = 600  # the zoo's LLM: vLLM starts its engine in 20 s idle, minutes on a busy machine


def test_cache_dir() -> Path:
    """The stage cache tests build the zoo with: never the developer's own ``.tritonforge/cache``."""
    return Path(os.environ.get("TRITONFORGE_TEST_CACHE", ROOT / ".tritonforge" / "test-cache"))


def built_stage(repo: Path, model: str, stage: str) -> Path:
    """The folder in the tests' stage cache of the stage that built ``model`` into ``repo``, by the
    key its manifest records (the cache keeps older entries of each stage too)."""
    key = json.loads((repo / "manifest.json").read_text())["models"][model]["stages"][stage]["key"]
    return test_cache_dir() / model / stage / key


test_cache_dir.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def tree_digest(root: Path) -> str:
    """Names, modes and contents of every file under root: equal digests = byte-for-byte equal."""
    digest = hashlib.sha256()
    for item in sorted(root.rglob("*")):
        digest.update(str(item.relative_to(root)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A fresh copy of the tiny project (spec, factory module, data) in tmp_path."""
    project = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "tiny", project)
    sys.path.insert(0, str(project))
    from tinyzoo import make_data  # type: ignore[import-not-found]

    make_data(project / "data")
    sys.path.remove(str(project))
    return project


@pytest.fixture(scope="session")
def zoo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default zoo built for the local target (stages come from the test cache): where
    --build-zoo-first built it, that build's repository, copied as the builder copies a built one."""
    repo = tmp_path_factory.mktemp("zoo") / "model_repository"
    if ZOO_REPO_ENV in os.environ:
        link_tree(Path(os.environ[ZOO_REPO_ENV]), repo)
        return repo
    opts = BuildOptions(
        ROOT / "models.yaml", repo, target="local", cache_dir=test_cache_dir(), log=lambda _: None
    )
    build(opts)
    return repo


# The engine group's shared servers (tests/engines.py): started when a module first holds one,
# stopped when a test needs their room, at the latest when the session ends.
SHARED = SharedServers()


@pytest.fixture(scope="module")
def triton(zoo_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The session's one real tritonserver on the zoo repository, held for the module."""

    def start() -> TritonServer:
        server = TritonServer(zoo_repo, log_path=tmp_path_factory.mktemp("triton") / "server.log")
        server.start(timeout=ZOO_START_TIMEOUT)
        return server

    with SHARED.hold(ZOO, start) as server:
        yield server


@pytest.fixture(scope="module")
def llm_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The session's server with the zoo's LLM (fixtures/llm_repo.py's SHARED_ENGINE) for every module
    that needs no engine settings of its own, held for the module. Each test leaves it with no
    request in flight."""
    from tests.integration.fixtures.llm_repo import SHARED_ENGINE, SHARED_SETTINGS, start_llm_server

    def start() -> TritonServer:
        return start_llm_server(tmp_path_factory.mktemp("llm"), SHARED_ENGINE, SHARED_SETTINGS)

    with SHARED.hold(LLM, start) as server:
        yield server


class ServerCrashed(Exception):
    """The shared tritonserver died during a test, and the test failed again on a fresh one."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A crash of the shared server fails the run, unless the test that saw it passes when run
    again on a restarted server (tritonserver 2.51 has segfaulted about once in several full
    runs). Either way the crashed server's log is kept under .tritonforge/test-logs/."""
    outcome = yield
    crashed = [s for s in SHARED.running() if not s.is_running()]
    if not crashed:
        return
    logs = [_keep_log(s, item.name) for s in crashed]
    for server in crashed:
        server.restart()
    try:
        item.runtest()
    except Exception as exc:
        outcome.force_exception(ServerCrashed(f"shared tritonserver died (log kept: {logs}); retried: {exc}"))
        return
    warnings.warn(f"shared tritonserver died during {item.name} (log kept: {logs}); passed when retried",
                  stacklevel=1)  # fmt: skip
    outcome.force_result(None)


def _keep_log(server: TritonServer, test: str) -> Path:
    KEPT_LOGS.mkdir(parents=True, exist_ok=True)
    kept = KEPT_LOGS / f"{test}.server.log"
    if server.log_path is not None and Path(server.log_path).is_file():
        shutil.copy2(server.log_path, kept)
    return kept


@pytest.fixture(autouse=True)
def _import_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Factories put the spec's folder on sys.path and import modules from it: undo both. Only
    modules of the tests' own temporary projects are forgotten (an extension module imported
    twice breaks, and the project's environment may itself live under /tmp)."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    scratch = str(tmp_path_factory.getbasetemp())
    for name in set(sys.modules) - modules:
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if origin.startswith(scratch):
            del sys.modules[name]


# ---------------------------------------------------------------- several processes (`make test`)


MODULE_ASKS: dict[str, frozenset[str]] = {}  # the shared servers each collected module asks for


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    MODULE_ASKS.update(assign_groups(items))
    if hasattr(config, "workerinput") and GROUPS_ENV in os.environ:
        write_groups(items, Path(os.environ[GROUPS_ENV]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist", "no") != "loadgroup":
        return None
    return GroupScheduling(config, log, groups=Path(os.environ[GROUPS_ENV]))


def pytest_unconfigure(config: pytest.Config) -> None:
    stop_stage_venvs()
    if not hasattr(config, "workerinput") and GROUPS_ENV in os.environ:
        shutil.rmtree(Path(os.environ.pop(GROUPS_ENV)).parent, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the groups file before xdist starts its workers (they inherit it)."""
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup":
        os.environ[GROUPS_ENV] = str(Path(tempfile.mkdtemp(prefix="tritonforge-groups-")) / "groups.json")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each test, stop the shared servers its module does not ask for and no module holds:
    the room its own engines may need."""
    SHARED.make_room(keep=set(MODULE_ASKS.get(module_of(item.nodeid), frozenset())))


# ---------------------------------------------------------------- servers and engines where they belong

# A test that starts a tritonserver carries one of these markers (the README's fast run,
# -m "not integration and not slow", starts none), and one that starts a vLLM engine is in the
# engine group. Both are checked as the server or the build's vLLM child starts (whatever the
# path to it), so a module that tests/engines.py cannot see (a build, a helper) fails too.
SERVER_MARKERS = ("integration", "slow")
ENGINE_ARGS = "model.json"  # the vllm_engine model's engine arguments, beside its model.py
_RUNNING: list[pytest.Item] = []  # the test this process is setting up, running or tearing down


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _RUNNING.append(item)
    yield
    _RUNNING.remove(item)


def serves_engine(server: TritonServer) -> bool:
    """Whether the server loads a vLLM engine: a local-target LLM (model.py beside its engine
    arguments) that its model control mode loads."""
    for args in server.repo.glob(f"*/*/{ENGINE_ARGS}"):
        name = args.parents[1].name
        loaded = server.model_control != "explicit" or {"*", name} & set(server.load_models)
        if loaded and (args.parent / "model.py").is_file():
            return True
    return False


def server_refusal(item: pytest.Item, server: TritonServer) -> str | None:
    """Why ``item`` may not start ``server``, if it may not."""
    if not any(item.get_closest_marker(m) for m in SERVER_MARKERS):
        return f"{item.nodeid} starts a tritonserver: mark it integration (or slow)"
    return engine_refusal(item, "a server's") if serves_engine(server) else None


def engine_refusal(item: pytest.Item, whose: str) -> str | None:
    """Why ``item`` may not start a vLLM engine (``whose``: what runs it), if it may not."""
    if group_of(item) == ENGINE_GROUP:
        return None
    return (f"{item.nodeid} starts a vLLM engine ({whose}): mark its module "
            f"pytest.mark.xdist_group(ENGINE_GROUP) (tests/engines.py)")  # fmt: skip


ENGINE_RUNNER = "builder.llm.vllm_greedy"  # the child a build verifies its LLM in (builder/llm/verify.py)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """A build's vLLM child is refused as it starts (before the fork) where server_refusal cannot see it."""
    if event != "subprocess.Popen" or not _RUNNING:
        return
    argv = args[1]
    words = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    refusal = engine_refusal(_RUNNING[-1], "a build's verification") if ENGINE_RUNNER in words else None
    if refusal is not None:
        pytest.fail(refusal, pytrace=False)  # a BaseException: a build's own handlers let it through


_start = TritonServer.start


def _checked_start(self: TritonServer, timeout: float = 120) -> None:
    refusal = server_refusal(_RUNNING[-1], self) if _RUNNING else None
    if refusal is not None:
        pytest.fail(refusal, pytrace=False)
    _start(self, timeout)


TritonServer.start = _checked_start  # type: ignore[method-assign]
sys.addaudithook(_audit)


# ---------------------------------------------------------------- a run leaves the tree as it found it


def _tree_status() -> set[str] | None:
    """`git status --porcelain` lines (tracked changes and untracked files), None outside a checkout."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


_STATUS_AT_START: list[set[str] | None] = []

# ... and /dev/shm as it found it: the servers some tests kill on purpose, not through
# TritonServer.stop, leave their shared memory behind (builder/shared_memory.py).
_SHM_AT_START: list[set[str]] = []

# ... and says how much memory it took: the run's processes (xdist's workers, the servers and
# engines under them) read from /proc each second by the controller, printed after the slowest tests.
_SAMPLER: list[Sampler] = []
_PEAKS: list[Peaks] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--build-zoo-first", action="store_true", default=False,
        help="build the zoo of models.yaml into the test stage cache before the test processes start",
    )  # fmt: skip


def pytest_sessionstart(session: pytest.Session) -> None:
    """The run's own process (not each worker): the tree's state, the memory sampler, and with
    --build-zoo-first the zoo's stages, before xdist starts the workers (its own sessionstart is
    trylast), so every build of models.yaml in the run finds them made."""
    if hasattr(session.config, "workerinput"):
        return
    _STATUS_AT_START.append(_tree_status())
    _SHM_AT_START.append(shared_memory.shm_names())
    _SAMPLER.append(Sampler(os.getpid()))
    _SAMPLER[0].start()
    if session.config.getoption("build_zoo_first"):
        build_zoo_first(session.config)


# The targets the tests build models.yaml for (golden configs, targets, Dockerfile stages): local
# first, whose stages the other two reuse, and whose repository is zoo_repo.
ZOO_TARGETS = ("local", "cpu", "gpu")
ZOO_REPO_ENV = "TRITONFORGE_TEST_ZOO_REPO"
STAGE_VENVS_LOG = KEPT_LOGS / "stage-venvs.log"
# --build-zoo-first's (the controller's): its scratch folder, the stage venvs' process, its time.
_ZOO_SCRATCH: list[Path] = []
_STAGE_VENVS: list[subprocess.Popen[bytes]] = []
_ZOO_SECONDS: list[float] = []


def build_zoo_first(config: pytest.Config) -> None:
    """`tritonforge build` of models.yaml for each of ZOO_TARGETS with the tests' stage cache, one
    after another, each in a process of its own (this one stays small), its lines shown as they
    come; zoo_repo is the local one's repository. The Dockerfile's stage venvs are made meanwhile at
    nice 19 (start_stage_venvs), on what the builds leave idle. Measured: pip at an equal share
    beside the local build slowed its LLM verification by a third; cpu and gpu builds in the
    background made stages a test then waited for, or made again in its own process (7.6 GiB)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    say(f"building models.yaml's zoo into {test_cache_dir()} before the tests (--build-zoo-first)")
    began, scratch = time.monotonic(), Path(tempfile.mkdtemp(prefix="tritonforge-zoo-"))
    _ZOO_SCRATCH.append(scratch)
    start_stage_venvs()
    for target in ZOO_TARGETS:
        build_target(target, scratch / target, say)
    _ZOO_SECONDS.append(time.monotonic() - began)
    say(f"the zoo built in {_ZOO_SECONDS[0]:.0f} s; stage venvs in the background: {STAGE_VENVS_LOG}")
    os.environ[ZOO_REPO_ENV] = str(scratch / ZOO_TARGETS[0])  # zoo_repo's, in the workers
    os.environ[ZOO_BUILT_ENV] = "1"  # the workers inherit it (tests/engines.py)


def build_target(target: str, repo: Path, say: Any) -> None:
    """One `tritonforge build` into ``repo``; a build that fails ends the run (its lines were shown)."""
    spec, cache = ROOT / "models.yaml", test_cache_dir()
    command = [sys.executable, "-m", "builder.cli", "build", "--spec", str(spec), "--repo", str(repo),
               "--target", target, "--cache", str(cache)]  # fmt: skip
    out = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with out:
        for line in out.stdout or ():
            say(f"[{target}] {line.rstrip()}")
    if out.returncode != 0:
        pytest.exit(f"the zoo did not build ({' '.join(command)}: exit {out.returncode})", returncode=1)


def start_stage_venvs() -> None:
    """The Dockerfile's stage venvs made in the tests' stage cache at nice 19, on the cores the
    builds and tests leave idle; the stage test waits for them on their lock. A process group of its
    own (killed as one), in this session: with Linux's autogroup (sched_autogroup_enabled), a
    session of its own would get an equal share of the CPU whatever its nice."""
    KEPT_LOGS.mkdir(parents=True, exist_ok=True)
    command = ["nice", "-n", "19", sys.executable, "-m", "tests.integration.fixtures.docker_stages",
               str(test_cache_dir())]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with STAGE_VENVS_LOG.open("wb") as sink:
        _STAGE_VENVS.append(subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=os.setpgrp
        ))  # fmt: skip


def finish_stage_venvs(session: pytest.Session) -> None:
    """Wait for the stage venvs (the run fails, naming their log, if they failed) and remove the zoo's
    scratch folder."""
    for process in _STAGE_VENVS:
        if process.wait() != 0:
            _fail_run(
                session, f"the Dockerfile's stage venvs failed (exit {process.returncode}): {STAGE_VENVS_LOG}"
            )
    for scratch in _ZOO_SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)


def stop_stage_venvs() -> None:
    """Kill them, pip and all, where the run ends early (an interrupt)."""
    for process in _STAGE_VENVS:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the shared servers, remove the shared memory the run's killed servers left; fail the run
    when it wrote, deleted or added anything git sees. That is checked when the tree was clean at
    the start (CI's fresh clone; a developer's tree with edits in progress is not)."""
    SHARED.stop_all()
    finish_stage_venvs(session)
    if _SHM_AT_START:
        shared_memory.remove_orphaned(shared_memory.shm_names() - _SHM_AT_START[0])
    if _SAMPLER:
        _PEAKS.append(_SAMPLER.pop().stop())
        if _PEAKS[0].engines > ENGINES_AT_ONCE:
            _fail_run(session, too_many_engines(_PEAKS[0]))
    before = _STATUS_AT_START[0] if _STATUS_AT_START else None
    if before != set():
        return
    after = _tree_status()
    if after is None:
        return
    # `python -m bench.reliability` points the recorded figures at the tracked bench/results/ on purpose.
    recorded, root = Path(os.environ["TRITONFORGE_RESULTS_DIR"]).resolve(), ROOT.resolve()
    kept = str(recorded.relative_to(root)) + "/" if recorded.is_relative_to(root) else None
    changed = sorted(line for line in after - before if not (kept and line[3:].startswith(kept)))
    if changed:
        _fail_run(
            session,
            "the test run changed the source tree (git status --porcelain):\n  " + "\n  ".join(changed),
        )


def _fail_run(session: pytest.Session, message: str) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def too_many_engines(peaks: Peaks) -> str:
    return (f"{peaks.engines} vLLM engines were up at once, more than ENGINES_AT_ONCE ({ENGINES_AT_ONCE}) "
            "in tests/engines.py; each engine's parent:\n  " + "\n  ".join(peaks.engines_seen))  # fmt: skip


def peak_line(peaks: Peaks) -> str:
    return (f"peak memory: {peaks.rss / 2**30:.1f} GiB resident, the run's processes together (read each "
            f"second); vLLM engines up at once: {peaks.engines} (at most {ENGINES_AT_ONCE})")  # fmt: skip


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The run's peak memory, after --durations' slowest tests (the controller's only: it has the peaks)."""
    if _PEAKS and not terminalreporter.config.option.collectonly:
        KEPT_LOGS.mkdir(parents=True, exist_ok=True)
        kept = KEPT_LOGS / "peak-memory.txt"
        kept.write_text("\n".join(breakdown(_PEAKS[0].at_peak)) + "\n")
        terminalreporter.write_line(f"{peak_line(_PEAKS[0])}; its largest processes: {kept}")
    if _ZOO_SECONDS:
        terminalreporter.write_line(
            f"the tests waited {_ZOO_SECONDS[0]:.0f} s for the zoo's builds (--build-zoo-first) "
            "before pytest's clock started: add it to the time below"
        )
