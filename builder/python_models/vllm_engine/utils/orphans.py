"""No engine outlives its stub. vLLM's engine core processes are the stub's children and do not
watch it: when the stub dies without finalize() (tritonserver killed, or its exit timeout expired
while Triton still held the model), they would live on, reparented, with the model's memory.

A watcher, this module run as a process of its own once the engines are up, waits for the stub to go
and then kills the processes it was given: the stub's descendants at that time, each checked by
its start time so that a reused pid is left alone. finalize() stops the engines, then the watcher."""

from __future__ import annotations

import contextlib
import multiprocessing.spawn
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

POLL_S = 0.5  # how often the watcher looks for its stub where the kernel has no pidfd


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (its children, theirs, and so on)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in os.listdir(f"/proc/{parent}/task"):
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def start_time(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks (the 22nd field of /proc/<pid>/stat); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def watch_engines() -> Any:
    """Start the watcher over this process's descendants (the engines just started); None where
    there are none."""
    recorded = [f"{pid}:{t}" for pid in descendants(os.getpid()) if (t := start_time(pid))]
    if not recorded:
        return None
    python = os.fsdecode(multiprocessing.spawn.get_executable())  # what vLLM's engine core runs on
    args = [python, "-I", __file__, str(os.getpid()), *recorded]  # -I: not beside its siblings
    try:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:  # a safety net: the model serves without it, and says so
        pb_utils.Logger.log_warn(f"vllm_engine: no watcher for the engines' processes ({exc})")
        return None


def watch(stub: int, recorded: list[str]) -> None:
    """The watcher: wait for the stub (this process's parent) to exit, then kill each recorded
    ``pid:start`` still running with that start time."""
    try:
        fd = os.pidfd_open(stub)
    except OSError:  # no pidfd on this kernel: look for the parent instead
        while os.getppid() == stub:
            time.sleep(POLL_S)
    else:
        select.select([fd], [], [])  # readable once the stub has exited
        os.close(fd)
    for item in recorded:
        pid, start = item.split(":")
        if start_time(int(pid)) == start:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2:])
