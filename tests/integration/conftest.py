"""Shared integration fixtures: the default zoo built for the local target, served for real.

The build uses the project's stage cache (``.tritonforge/cache``), so after
``make engines`` the session fixture only assembles the repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.pipeline import BuildOptions, build
from builder.server import TritonServer

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="session")
def zoo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("zoo") / "model_repository"
    build(BuildOptions(spec_file=ROOT / "models.yaml", repo=repo, target="local", log=lambda _: None))
    return repo


@pytest.fixture(scope="session")
def triton(zoo_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("triton") / "server.log"
    with TritonServer(zoo_repo, log_path=log) as server:
        yield server
