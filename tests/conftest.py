"""Shared test helpers: a copy of a small project to build, and repository snapshots."""

from __future__ import annotations

import hashlib
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from builder.server import TritonServer

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "builder" / "fixtures"


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
    """The default zoo built for the local target (stages come from the project's cache)."""
    from builder.pipeline import BuildOptions, build

    repo = tmp_path_factory.mktemp("zoo") / "model_repository"
    build(BuildOptions(spec_file=ROOT / "models.yaml", repo=repo, target="local", log=lambda _: None))
    return repo


_SESSION_SERVERS: list[TritonServer] = []


@pytest.fixture(scope="session")
def triton(zoo_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One real tritonserver on the zoo repository for the whole session."""
    from builder.server import TritonServer

    log = tmp_path_factory.mktemp("triton") / "server.log"
    with TritonServer(zoo_repo, log_path=log) as server:
        _SESSION_SERVERS.append(server)
        yield server
        _SESSION_SERVERS.remove(server)


@pytest.fixture(autouse=True)
def _session_server_alive() -> None:
    """tritonserver 2.51 has crashed (SIGSEGV in pthread_mutex_lock) about once in several full
    runs: restart the shared server before the next test, and say so, rather than fail every
    test after it. The crash itself stays in its log, which is kept."""
    for server in _SESSION_SERVERS:
        if not server.is_running():
            warnings.warn(f"shared tritonserver died (log: {server.log_path}); restarting", stacklevel=1)
            server.restart()
