"""Fixtures: a small ad-hoc repository served for real, and the zoo's shared fixtures."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from builder.server import TritonServer
from tests.clients.perf.adhoc_repo import write_repo


@pytest.fixture(scope="session")
def perf_analyzer() -> str:
    from clients.perf import PerfError, find_perf_analyzer

    try:
        return find_perf_analyzer()
    except PerfError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def adhoc(tmp_path_factory: pytest.TempPathFactory, perf_analyzer: str) -> Iterator[TritonServer]:
    """dyn_add (FP32 [-1] inputs), text_len (STRING), image_size (encoded image BYTES)."""
    root = tmp_path_factory.mktemp("adhoc")
    with TritonServer(write_repo(root / "repo"), log_path=root / "server.log") as server:
        yield server
    shutil.rmtree(root / "repo", ignore_errors=True)
