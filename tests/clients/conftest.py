"""Fixtures for the client tests; ``zoo_repo`` and ``triton`` come from tests/conftest.py.

``fresh_server`` is a private server on the same repository, for tests that stop it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.server import TritonServer
from tests.clients.held import HeldServer, start_held
from tests.integration.fixtures.reliability_repo import reliability_repo


@pytest.fixture
def fresh_server(zoo_repo: Path, tmp_path: Path) -> Iterator[Callable[[], TritonServer]]:
    """A factory of started private servers on `zoo_repo` (only `simple`: starts in seconds)."""
    started: list[TritonServer] = []

    def start() -> TritonServer:
        server = TritonServer(
            zoo_repo, model_control="explicit", load_models=["simple"], log_path=tmp_path / "server.log"
        )
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop(timeout=5)


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(triton: Any, protocol: str) -> str:
    return str(triton.grpc_url if protocol == "grpc" else triton.http_url)


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeldServer]:
    """A private server whose ``held`` model answers only when the test lets it (tests/clients/held.py)."""
    server = start_held(reliability_repo(tmp_path_factory))
    yield server
    server.server.stop(timeout=5)
