"""Run the build worker in a subprocess and turn how it ended into one message.

The worker fails a plan with ``ERROR_PREFIX`` and ``EXIT_FAILED`` for what TensorRT refuses; an
exception it did not expect ends it as Python ends on one (``EXIT_UNCAUGHT``, the traceback in the
log): a defect of the builder, which fails the build rather than the plan.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import builder
from builder.engines.cuda_runtime import with_cudart

ERROR_PREFIX = "tritonforge-engine-error: "  # the worker's one-line failure message
EXIT_FAILED = 3  # the worker failed the plan for a reason it names
EXIT_UNCAUGHT = 1  # Python's status for an uncaught exception
_ROOT = Path(builder.__file__).resolve().parent.parent


@dataclass(frozen=True)
class WorkerOutcome:
    ok: bool
    message: str  # empty when ok
    defect: bool = False  # an unexpected exception in the worker, its traceback in the log


def run_worker(request_file: Path, log: Path, timeout_s: float) -> WorkerOutcome:
    """The worker's stdout and stderr go to ``log``; its last error line becomes the message."""
    env = worker_env()
    cmd = [sys.executable, "-m", "builder.engines.worker", str(request_file)]
    with log.open("ab") as sink:
        try:
            proc = subprocess.run(cmd, stdout=sink, stderr=sink, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return WorkerOutcome(False, f"timed out after {timeout_s:g} s (engine.build_timeout_s)")
    if proc.returncode == 0:
        return WorkerOutcome(True, "")
    if proc.returncode < 0:
        return WorkerOutcome(False, f"TensorRT crashed the build process ({_signal_name(-proc.returncode)})")
    if proc.returncode == EXIT_UNCAUGHT:
        return WorkerOutcome(False, _last_error(log) or "an uncaught exception", defect=True)
    return WorkerOutcome(False, _last_error(log) or f"the build process exited with status {proc.returncode}")


def worker_env() -> dict[str, str]:
    """This environment, with the builder importable and the CUDA runtime's folders on
    ``LD_LIBRARY_PATH`` (where Polygraphy's runner looks for libcudart)."""
    env = with_cudart(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_error(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if line.startswith(ERROR_PREFIX):
            return line[len(ERROR_PREFIX) :]
    # An uncaught exception: its last traceback line names it.
    for line in reversed(lines):
        if line.strip() and not line.startswith(" "):
            return line.strip()
    return ""
