"""The ``tritonforge`` command line: one module per command in this package.

Every bad input ends as one line on stderr naming the file, model and field,
with exit status 2; a failure of the tool itself exits 1 and says what to do. An unexpected
exception is a defect of tritonforge: one line and exit status 1, its traceback kept in a log
whose path the line gives (``--debug`` prints it as well).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from builder.cli import build, deploy, engines, estimate, init, perf, serve, tune
from builder.errors import BuildError, StageDefect, UserError
from builder.failures import failure_line

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
        return _defect(exc, args)


def _defect(exc: Exception, args: argparse.Namespace) -> int:
    """An unexpected exception: a defect of tritonforge, never blamed on the input. One line, and
    the traceback in a log (printed too with ``--debug``)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log = Path(tempfile.gettempdir()) / "tritonforge" / f"{args.command}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text, encoding="utf-8")
    print(
        f"internal error in 'tritonforge {args.command}': {failure_line(exc)} (a defect of tritonforge; "
        f"traceback in {log}; please report it with that file)",
        file=sys.stderr,
    )
    if args.debug:
        print(text, file=sys.stderr, end="")
    return 1
