"""The ``tritonforge`` command line: one module per command in this package.

Every bad input ends as one line on stderr naming the file, model and field,
with exit status 2; a failure of the tool itself exits 1 and says what to do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from builder.cli import build, deploy, engines, estimate, init, perf, serve, tune
from builder.errors import BuildError, UserError

# Each command module has add_parser(subparsers), which sets ``func`` to its run(args).
COMMANDS = (init, build, engines, serve, deploy, perf, tune, estimate)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="tritonforge",
        description="Build, verify, serve and measure a Triton model repository from models.yaml.",
    )
    subparsers = root.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
