"""Telling a refusal of the user's model from a defect of the builder.

A stage that fails on the user's model fails for a named reason: the builder's own checks raise a
``UserError`` or :class:`~builder.errors.ModelRefused`, and the model libraries (ONNX, ONNX Runtime,
the quantizer, torch, transformers) raise their own exceptions from their own code. The user's own
code (a factory, a data reader) failing is the user's too. Anything else, raised in the builder's
own code (a ``KeyError``, a ``TypeError``), is a defect: it must fail the build with its traceback
kept, never be shown as the model's fault. A refusal keeps its traceback too, in the stage's log,
which its line names: which frame raised is a guess (the innermost), the traceback tells.

A third kind is neither: the host refusing what the build needs (no space left on a device, a
permission on what the build writes, memory, a port taken, open files). It is an
:class:`~builder.errors.EnvironmentFault`, one line naming what and where, and it stops the build:
a variant dropped or a model left out because the disk is full would be wrong. A permission
refused on a file of the user's (under the spec's folder, not what the build writes) stays the
user's error.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath
from types import TracebackType
from typing import TypeVar

from builder.errors import BuildError, EnvironmentFault, ModelRefused, StageDefect, UserError

T = TypeVar("T")

# The libraries whose own exceptions mean "this model (or variant) cannot be made".
MODEL_LIBRARIES = (
    "onnx",
    "onnxruntime",
    "onnxsim",
    "onnxslim",
    "onnxconverter_common",
    "onnx_graphsurgeon",
    "polygraphy",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "sentence_transformers",
    "gguf",
    "PIL",
)
_PROJECT = Path(__file__).resolve().parent  # builder/
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def refusal(exc: BaseException, user_code: Path) -> str | None:
    """Why ``exc`` is an expected failure on the user's input, or None when it is a defect.

    ``user_code`` is the spec's folder: code there, outside the builder, is the user's own."""
    if isinstance(exc, (UserError, ModelRefused)):
        return failure_line(exc)
    frames = [Path(f.filename).resolve() for f in traceback.extract_tb(exc.__traceback__)]
    if any(_is_users(f, user_code.resolve()) for f in frames):
        return failure_line(exc)
    library = _library(frames[-1]) if frames else None
    return failure_line(exc) if library is not None else None


def _is_users(frame: Path, user_code: Path) -> bool:
    return (
        frame.is_relative_to(user_code)
        and not frame.is_relative_to(_PROJECT)
        and "site-packages" not in frame.parts
        and not frame.is_relative_to(_STDLIB)
    )


def _library(frame: Path) -> str | None:
    """The model library whose file ``frame`` is, if any."""
    parts = frame.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            top = parts[parts.index(marker) + 1] if parts.index(marker) + 1 < len(parts) else ""
            name = top.removesuffix(".py")
            return name if name in MODEL_LIBRARIES else None
    return None


def guarded(
    body: Callable[[Path], T], *, model: str, stage: str, user_code: Path, log: Path
) -> Callable[[Path], T]:
    """``body`` with its failures sorted: the host refusing what it needs (``EnvironmentFault``, or
    the user's error where the refused file is the user's, under ``user_code`` and outside the
    stage's output ``out`` and the model's stage cache, ``log``'s folder), the user's input
    (``UserError``), a named refusal of the model (``ModelRefused``, or a model library's own
    exception, wrapped in one), or else a defect of the builder, whose traceback is written to
    ``log`` (``StageDefect``, exit status 1)."""

    def run(out: Path) -> T:
        try:
            return body(out)
        except (UserError, BuildError):
            raise
        except Exception as exc:
            users = unreadable_input(exc, user_code, (out, log.parent), model=model)
            if users is not None:
                raise users from exc
            fault = environment_fault(exc, context=f" (model '{model}', {stage} stage)")
            if fault is not None:
                raise logged(fault, model, stage, log, exc) from exc
            if isinstance(exc, ModelRefused):
                refused(exc, exc, model, stage, log)
                raise
            if refusal(exc, user_code) is not None:
                raise refused(ModelRefused(failure_line(exc)), exc, model, stage, log) from exc
            raise defect(exc, model, stage, log) from exc

    return run


# What the host refused, by errno: the line's words, and what joins them to where (a path, a port).
HOST_REFUSALS = {
    errno.ENOSPC: ("no space left on device", " writing "),
    errno.EDQUOT: ("disk quota exceeded", " writing "),
    errno.EROFS: ("read-only file system", " writing "),
    errno.EACCES: ("permission denied", " on "),
    errno.EPERM: ("operation not permitted", " on "),
    errno.ENOMEM: ("out of memory", ""),
    errno.EADDRINUSE: ("address already in use", ": "),
    errno.EMFILE: ("too many open files (this process's limit)", " opening "),
    errno.ENFILE: ("too many open files (the system's limit)", " opening "),
}
PERMISSIONS = (errno.EACCES, errno.EPERM)
WRITES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # a write's own error names no file


def host_refusal(exc: BaseException) -> OSError | MemoryError | None:
    """The exception by which the host refused, in ``exc``'s chain (``exc`` itself, what it was
    raised from or while handling): an ``OSError`` of one of ``HOST_REFUSALS``' errnos, or a
    ``MemoryError``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return current
        if isinstance(current, OSError) and current.errno in HOST_REFUSALS:
            return current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


def environment_fault(
    exc: BaseException, *, where: str | Path | None = None, context: str = ""
) -> EnvironmentFault | None:
    """``exc`` as the host's refusal, if it is one: its one line names what was refused and where
    (the file the error names, the file being written where a write's error names none, else
    ``where``: a folder being written, a port), then ``context``."""
    found = host_refusal(exc)
    if found is None:
        return None
    if isinstance(found, MemoryError) or found.errno == errno.ENOMEM:
        return EnvironmentFault(f"out of memory{context}")
    what, joiner = HOST_REFUSALS[found.errno or 0]  # host_refusal found one of its errnos
    place = _named_file(found) or (str(where) if where is not None else None)
    return EnvironmentFault(f"{what}{joiner}{place}{context}" if place else f"{what}{context}")


def unreadable_input(
    exc: BaseException, users: Path, ours: Iterable[Path], *, model: str | None = None
) -> UserError | None:
    """A permission refused on a file of the user's: one under ``users`` (the spec's folder) and
    none of ``ours`` (what the command writes; a folder beside one of them named after it, as a
    repository's staging folder, too). The user's error, naming the file; None otherwise."""
    found = host_refusal(exc)
    if not isinstance(found, OSError) or found.errno not in PERMISSIONS or not found.filename:
        return None
    path = Path(os.fsdecode(found.filename)).resolve()
    if not path.is_relative_to(users.resolve()) or any(_is_ours(path, root.resolve()) for root in ours):
        return None
    what = HOST_REFUSALS[found.errno][0]
    return UserError(f"{what}: the spec names this file and the build cannot read it", file=path, model=model)


def _is_ours(path: Path, root: Path) -> bool:
    beside = path.is_relative_to(root.parent) and path != root.parent
    return path.is_relative_to(root) or (
        beside and path.relative_to(root.parent).parts[0].startswith(root.name + ".")
    )


def _named_file(exc: OSError) -> str | None:
    """The file ``exc`` names (a copy's or a rename's destination first, where it ran out of
    space), else, for a write's error, the file the innermost frame was writing."""
    names = [exc.filename2, exc.filename] if exc.errno in WRITES else [exc.filename]
    named = next((n for n in names if n not in (None, "")), None)
    if named is not None:
        return os.fsdecode(named) if isinstance(named, (str, bytes)) else str(named)
    return _written(exc.__traceback__) if exc.errno in WRITES else None


def _written(tb: TracebackType | None) -> str | None:
    """The path or open file the innermost frame that holds one was writing (``Path.write_text``'s
    ``self``, ``json.dump``'s ``fp``)."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, PurePath):
                return str(value)
            name = getattr(value, "name", None) if isinstance(value, io.IOBase) else None
            if isinstance(name, str):
                return name
    return None


def logged(
    fault: EnvironmentFault, model: str, stage: str, log: Path, raised: BaseException
) -> EnvironmentFault:
    """``fault`` with the traceback of ``raised`` written to ``log``, where the host lets it be
    written (a full disk may not: the command line then writes it elsewhere)."""
    try:
        _write_traceback(raised, model, stage, log)
    except OSError:
        return fault
    fault.log = log
    return fault


TRACEBACK_NOTE = "traceback in "


def refused(exc: ModelRefused, raised: BaseException, model: str, stage: str, log: Path) -> ModelRefused:
    """``exc``, the refusal of ``raised``, with the traceback of ``raised`` written to ``log`` and
    the log named in a note (:func:`reason` appends it)."""
    _write_traceback(raised, model, stage, log)
    exc.add_note(TRACEBACK_NOTE + str(log))
    return exc


def reason(exc: ModelRefused) -> str:
    """A refusal's line: the library's own exception where :func:`guarded` wrapped one, and the log
    that keeps its traceback."""
    logs = [n for n in getattr(exc, "__notes__", []) if n.startswith(TRACEBACK_NOTE)]
    return failure_line(exc.__cause__ or exc) + "".join(f" ({note})" for note in logs[-1:])


def defect(exc: BaseException, model: str, stage: str, log: Path) -> StageDefect:
    """``exc`` as a defect of ``stage``: its traceback written to ``log``, a one-line summary."""
    _write_traceback(exc, model, stage, log)
    return StageDefect(model, stage, failure_line(exc), log)


def _write_traceback(exc: BaseException, model: str, stage: str, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    header = f"tritonforge: model '{model}', stage {stage}, {stamp}, Python {sys.version.split()[0]}\n"
    log.write_text(header + "".join(lines), encoding="utf-8")


def failure_line(exc: BaseException) -> str:
    """The first line of an exception's message, with file paths (cache folders) cut to their names."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = _PATH.sub(lambda m: m.group(1), lines[0] if lines else "")
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


# An absolute file path (a cache folder's): at least two folders, a name with an extension.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\\/][^\\/\s'\"():,]+){2,}[\\/]([^\\/\s'\"():,]+\.\w+)")
