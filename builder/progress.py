"""Quiet stages that still show progress.

``quiet(log_file)`` sends what third-party code prints while a stage runs (Python warnings such as
torch's TracerWarning, writes to ``sys.stdout``/``sys.stderr`` such as transformers' "Loading
weights" bars, and what C++ libraries write to file descriptors 1 and 2) to the stage's log
file. ``progress(total, label)`` shows a bar with counts on the terminal the build started from,
and nothing when that is not a terminal (CI logs, pipes). A bar opened inside ``quiet`` still
reaches the terminal: it writes to the stream saved before the redirection.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TextIO

_terminal: list[TextIO] = []  # the stderr saved by the innermost quiet(), for bars


class Progress:
    """A counter that may have a bar: ``advance(n)`` after each unit of work."""

    def __init__(self, bar: Any | None) -> None:
        self._bar = bar
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)


def _stream() -> TextIO:
    return _terminal[-1] if _terminal else sys.stderr


def is_terminal(stream: IO[Any] | None = None) -> bool:
    stream = stream if stream is not None else _stream()
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress(total: int, label: str, unit: str = "batch") -> Iterator[Progress]:
    """A bar ``label |####| done/total`` on a terminal, none elsewhere (or when ``total`` is 0);
    the count is kept either way."""
    stream = _stream()
    bar = None
    if total > 0 and is_terminal(stream):
        from tqdm import tqdm  # type: ignore[import-untyped]  # only for a terminal

        bar = tqdm(total=total, desc=label, unit=unit, file=stream, ncols=100, leave=False)
    try:
        yield Progress(bar)
    finally:
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def quiet(log_file: Path, *, fds: bool = True) -> Iterator[Path]:
    """Everything printed inside goes to ``log_file`` (appended; removed if it stays empty);
    warnings are written there once each.

    ``fds`` also redirects file descriptors 1 and 2 (what C/C++ libraries print); bars from
    ``progress`` still reach the terminal through a duplicate of the original stderr."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8", buffering=1) as log, contextlib.ExitStack() as stack:
        terminal = stack.enter_context(_saved_stderr()) if fds else sys.stderr
        _terminal.append(terminal)
        stack.callback(_terminal.pop)
        if fds:
            stack.enter_context(_fds_to(log))
        stack.enter_context(contextlib.redirect_stdout(log))
        stack.enter_context(contextlib.redirect_stderr(log))
        stack.enter_context(_warnings_to(log))
        yield log_file
    if log_file.stat().st_size == 0:
        log_file.unlink()  # nothing was said: no log


@contextlib.contextmanager
def _warnings_to(log: TextIO) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # each distinct warning once, as Python shows them

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:  # fmt: skip
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _saved_stderr() -> Iterator[TextIO]:
    """A text stream on a duplicate of fd 2 as it is now (the terminal, if it is one)."""
    try:
        fd = os.dup(sys.__stderr__.fileno() if sys.__stderr__ else 2)
    except (OSError, ValueError, io.UnsupportedOperation):
        yield sys.stderr
        return
    stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        yield stream
    finally:
        stream.close()


@contextlib.contextmanager
def _fds_to(log: TextIO) -> Iterator[None]:
    """Point fds 1 and 2 at the log file for the duration; restored even on errors."""
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if s is not None:
                s.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield
    finally:
        for s in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                if s is not None:
                    s.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
