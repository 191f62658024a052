"""The vllm_engine model's watcher (utils/orphans.py) run as the model runs it: a process of its
own that, once its parent (the stub) exits, kills the processes it recorded, and only those still
running with the start time recorded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from builder.python_models.vllm_engine.utils import orphans
from tests.integration.fixtures.processes import alive, wait_gone

STUB = textwrap.dedent("""
    import os, subprocess, sys
    watcher = subprocess.Popen([sys.executable, "-I", sys.argv[1], str(os.getpid()), *sys.argv[2:]])
    print(watcher.pid, flush=True)
""")  # starts the watcher with the arguments it is given, then exits at once, as a killed stub


def _stub_then_watcher(recorded: list[str]) -> int:
    """Run a stand-in stub that starts the watcher over ``recorded`` and exits; the watcher's pid."""
    stub = subprocess.Popen(
        [sys.executable, "-c", STUB, orphans.__file__, *recorded],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert stub.stdout is not None
    return int(stub.stdout.readline()) if stub.wait(30) == 0 else -1


def test_the_watcher_kills_what_it_recorded_once_its_parent_exits() -> None:
    engine, spared = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    try:
        started = orphans.start_time(engine.pid)
        recorded = [f"{engine.pid}:{started}", f"{spared.pid}:1"]  # a reused pid: another start time
        watcher = _stub_then_watcher(recorded)
        assert watcher > 0
        assert wait_gone([engine.pid, watcher], 30) == []
        assert alive(spared.pid)
    finally:
        for process in (engine, spared):
            process.kill()
            process.wait()
