"""No engine outlives its stub. vLLM's engine core processes are the stub's children and do not
watch it: when the stub dies without finalize() (tritonserver killed, or its exit timeout expired
while Triton still held the model), they would live on, reparented, with the model's memory.

A watcher, a small process of its own started once the engines are up, waits for the stub to go
and then kills the processes it was given: the stub's descendants at that time, each checked by
its start time so that a reused pid is left alone. finalize() stops the engines, then the watcher."""

from __future__ import annotations

import multiprocessing.spawn
import os
import subprocess
from typing import Any

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

POLL_S = 0.5  # how often the watcher looks for its stub

# Runs alone (python -c): the stub's pid, then pid:start-time pairs (start time in clock ticks, the
# 22nd field of /proc/<pid>/stat).
WATCHER = f"""
import os, signal, sys, time
stub, recorded = int(sys.argv[1]), [a.split(":") for a in sys.argv[2:]]
def started(pid):
    try:
        with open(f"/proc/{{pid}}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None
while os.getppid() == stub:
    time.sleep({POLL_S})
for pid, start in recorded:
    if started(pid) == start:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
"""


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
    args = [python, "-c", WATCHER, str(os.getpid()), *recorded]
    try:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:  # a safety net: the model serves without it, and says so
        pb_utils.Logger.log_warn(f"vllm_engine: no watcher for the engines' processes ({exc})")
        return None
