"""Fixtures for the client tests.

`zoo_repo` and `triton` are the shared ones of tests/integration/conftest.py (the default zoo built
for the local target, served for real). Only when those cannot be imported (builder not ready) does
a development fallback serve a small stand-in repository (tests/clients/_devserver.py).
`fresh_server` is a private server on the same repository, for tests that stop it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def _shared_fixtures() -> Any:
    if os.environ.get("TRITONFORGE_CLIENTS_DEV"):
        return None
    try:
        import tests.integration.conftest as shared
    except Exception:
        return None
    return shared


_shared = _shared_fixtures()

if _shared is not None:
    from builder.server import TritonServer

    zoo_repo = _shared.zoo_repo
    triton = _shared.triton

    def _server(repo: Path, scratch: Path) -> Any:
        # Only `simple`: a private server that starts in seconds.
        return TritonServer(
            repo, model_control="explicit", load_models=["simple"], log_path=scratch / "server.log"
        )

else:
    from tests.clients._devserver import DevServer, build_dev_repo

    @pytest.fixture(scope="session")
    def zoo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return build_dev_repo(tmp_path_factory.mktemp("devzoo") / "model_repository")

    @pytest.fixture(scope="session")
    def triton(zoo_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
        with DevServer(zoo_repo, tmp_path_factory.mktemp("triton")) as server:
            yield server

    def _server(repo: Path, scratch: Path) -> Any:
        return DevServer(repo, scratch)


@pytest.fixture
def fresh_server(zoo_repo: Path, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of started private servers on `zoo_repo`; all are stopped at the end."""
    started: list[Any] = []

    def start() -> Any:
        server = _server(zoo_repo, tmp_path)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(triton: Any, protocol: str) -> str:
    return str(triton.grpc_url if protocol == "grpc" else triton.http_url)
