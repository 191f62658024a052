"""Keep third-party output (progress bars, C++ warnings) in a log file, not the build's output."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Send file descriptors 1 and 2 (C's writes) and ``sys.stdout``/``sys.stderr`` (Python's,
    which need not be those descriptors, for example under pytest) to ``log`` meanwhile."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("a", encoding="utf-8", errors="replace") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            with redirect_stdout(handle), redirect_stderr(handle):
                yield
        finally:
            handle.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
