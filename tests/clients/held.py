"""A private tritonserver on the reliability spec's ``held`` model: a request the server holds until
the test lets it go, for the timeout and shared-memory tests. Ordering by control: the gate is
shut while the client times out, so no model or machine is ever fast enough to answer first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from builder.server import TritonServer

MODEL = "held"


class HeldServer:
    """The server and the gate of its ``held`` model."""

    def __init__(self, repo: Path, log: Path) -> None:
        self.server = TritonServer(repo, model_control="explicit", load_models=[MODEL], log_path=log)
        self._gate = repo / MODEL / "open"

    def url(self, protocol: str) -> str:
        return self.server.grpc_url if protocol == "grpc" else self.server.http_url

    @contextmanager
    def shut(self) -> Iterator[None]:
        """Requests to ``held`` wait in the server inside this block, and are answered when it ends."""
        self._gate.unlink(missing_ok=True)
        try:
            yield
        finally:
            self.open()

    def open(self) -> None:
        self._gate.touch()


def start_held(repo: Path) -> HeldServer:
    """Serve ``held`` alone from a built repository of the reliability spec."""
    held = HeldServer(repo, repo.parent / "held.log")
    held.open()
    held.server.start()
    return held


def held_inputs(batch: int = 2) -> dict[str, np.ndarray]:
    return {"X": np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)}
