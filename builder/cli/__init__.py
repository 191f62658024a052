"""The ``tritonforge`` command line: one module per command in this package.

Every bad input ends as one line on stderr naming the file, model and field,
with exit status 2; a failure of the tool itself exits 1 and says what to do. The host refusing
what a command needs (no space left, a permission, memory, a port taken) is named as such: one
line naming what and where, exit status 1, the traceback kept in a log whose path the line gives.
Any other unexpected exception is a defect of tritonforge: one line and exit status 1, its
traceback kept in a log whose path the line gives (``--debug`` prints either as well).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from builder.cache import cache_root
from builder.cli import build, deploy, engines, estimate, init, perf, serve, tune
from builder.errors import BuildError, EnvironmentFault, StageDefect, UserError
from builder.failures import environment_fault, failure_line, unreadable_input

# Each command module has add_parser(subparsers), which sets ``func`` to its run(args).
COMMANDS = (init, build, engines, serve, deploy, perf, tune, estimate)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="tritonforge",
        description="Build, verify, serve and measure a Triton model repository from models.yaml.",
    )
    root.add_argument("--debug", action="store_true", help="print the traceback of a failure of tritonforge")
    subparsers = root.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    for sub in subparsers.choices.values():  # `tritonforge build --debug` too
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except EnvironmentFault as exc:
        return _fault(exc, exc, args)
    except StageDefect as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        if args.debug:
            print(exc.log.read_text(encoding="utf-8"), file=sys.stderr)
        return 1
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        users, ours = _named_paths(args)
        mine = unreadable_input(exc, users, ours) if users is not None else None
        if mine is not None:
            print(f"error: {mine.one_line()}", file=sys.stderr)
            return mine.exit_code
        fault = environment_fault(exc)
        if fault is not None:
            return _fault(fault, exc, args)
        return _defect(exc, args)


def _named_paths(args: argparse.Namespace) -> tuple[Path | None, list[Path]]:
    """The folder of the user's own files (the spec's) and what the command writes there (the
    repository, the stage cache), as its arguments name them."""
    spec = getattr(args, "spec", None)
    if spec is None:
        return None, []
    ours = [Path(p) for p in (getattr(args, "repo", None), getattr(args, "cache", None)) if p is not None]
    return Path(spec).resolve().parent, [*ours, cache_root(Path(spec))]


def _fault(fault: EnvironmentFault, raised: BaseException, args: argparse.Namespace) -> int:
    """The host refused what the command needs: one line naming what and where, the traceback in
    a log (printed instead where no log can be written, as on the disk that is full)."""
    text = "".join(traceback.format_exception(type(raised), raised, raised.__traceback__))
    log = fault.log
    if log is None:
        try:
            log = _write_log(text, args)
        except OSError as exc:
            print(
                f"error: {fault.what} (its traceback could not be written: {exc}; it follows)",
                file=sys.stderr,
            )
            print(text, file=sys.stderr, end="")
            return 1
    print(f"error: {fault.what}: see the traceback in {log}", file=sys.stderr)
    if args.debug:
        print(text, file=sys.stderr, end="")
    return 1


def _write_log(text: str, args: argparse.Namespace) -> Path:
    log = Path(tempfile.gettempdir()) / "tritonforge" / f"{args.command}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text, encoding="utf-8")
    return log


def _defect(exc: Exception, args: argparse.Namespace) -> int:
    """An unexpected exception: a defect of tritonforge, never blamed on the input. One line, and
    the traceback in a log (printed too with ``--debug``)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log = _write_log(text, args)
    print(
        f"internal error in 'tritonforge {args.command}': {failure_line(exc)} (a defect of tritonforge; "
        f"traceback in {log}; please report it with that file)",
        file=sys.stderr,
    )
    if args.debug:
        print(text, file=sys.stderr, end="")
    return 1
