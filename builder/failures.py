"""Telling a refusal of the user's model from a defect of the builder.

A stage that fails on the user's model fails for a named reason: the builder's own checks raise a
``UserError`` or :class:`~builder.errors.ModelRefused`, and the model libraries (ONNX, ONNX Runtime,
the quantizer, torch, transformers) raise their own exceptions from their own code. The user's own
code (a factory, a data reader) failing is the user's too. Anything else, raised in the builder's
own code (a ``KeyError``, a ``TypeError``), is a defect: it must fail the build with its traceback
kept, never be shown as the model's fault. A refusal keeps its traceback too, in the stage's log,
which its line names: which frame raised is a guess (the innermost), the traceback tells.
"""

from __future__ import annotations

import re
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from builder.errors import BuildError, ModelRefused, StageDefect, UserError

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
    """``body`` with its failures sorted: the user's input (``UserError``), a named refusal of the
    model (``ModelRefused``, or a model library's own exception, wrapped in one), or else a defect
    of the builder, whose traceback is written to ``log`` (``StageDefect``, exit status 1)."""

    def run(out: Path) -> T:
        try:
            return body(out)
        except (UserError, BuildError):
            raise
        except ModelRefused as exc:
            refused(exc, exc, model, stage, log)
            raise
        except Exception as exc:
            if refusal(exc, user_code) is not None:
                raise refused(ModelRefused(failure_line(exc)), exc, model, stage, log) from exc
            raise defect(exc, model, stage, log) from exc

    return run


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
