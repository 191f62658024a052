"""A bench-only hook: with ``TRITONFORGE_RUNNER_TIMINGS`` set to a folder, the model writes the time
each ``execute`` and each of its phases took, a JSON line a call (bench/cpu_runtimes.py reads
them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

TIMINGS_ENV = "TRITONFORGE_RUNNER_TIMINGS"
PHASES = ("_feed", "_concat", "_run", "_split", "_response")


class Timings:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.current: dict[str, int] = {}
        self.lines: list[str] = []
        self.flushed = time.monotonic()

    def attach(self, model: Any) -> None:
        """Wrap the model's phases (instance attributes shadow the methods) and its execute."""
        for phase in PHASES:
            setattr(model, phase, self._timed(phase.lstrip("_"), getattr(model, phase)))
        model.execute = Timed(self, model.execute)

    def _timed(self, phase: str, fn: Any) -> Any:
        def timed(*args: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:
                self.current[phase] = self.current.get(phase, 0) + time.perf_counter_ns() - start

        return timed

    def record(self, requests: int, ns: int) -> None:
        self.lines.append(json.dumps({"requests": requests, "execute": ns, **self.current}))
        self.current = {}
        if time.monotonic() - self.flushed > 0.5:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            with self.path.open("a") as out:
                out.write("\n".join(self.lines) + "\n")
            self.lines = []
        self.flushed = time.monotonic()


class Timed:
    def __init__(self, timings: Timings, execute: Any) -> None:
        self.timings, self.inner = timings, execute

    def __call__(self, requests: list[Any]) -> Any:
        start = time.perf_counter_ns()
        out = self.inner(requests)
        self.timings.record(len(requests), time.perf_counter_ns() - start)
        return out
