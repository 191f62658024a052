"""The ``tritonforge`` command line.

Every bad input ends as one line on stderr naming the file, model and field,
with exit status 2; a failure of the tool itself exits 1 and says what to do.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from builder.errors import BuildError, UserError

# Subcommands implemented in their own modules: each has add_parser(subparsers) and run(args).
COMMANDS = (
    "builder.serve_cli",
    "builder.engines.cli",
    "builder.deploy.cli",
    "builder.perf_cli",
    "builder.tune.cli",
    "builder.estimate.cli",
)


def add_build_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="build and publish a model repository from models.yaml")
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--repo", type=Path, default=Path("model_repository"), help="output repository folder")
    p.add_argument(
        "--target",
        choices=("auto", "local", "cpu", "gpu"),
        default="auto",
        help="local: the pip-installed tritonserver (Python backend); cpu/gpu: the official container; "
        "auto: gpu where TensorRT and a GPU exist, else local",
    )
    p.add_argument(
        "--cache", type=Path, default=None, help="stage cache (default: .tritonforge/cache beside the spec)"
    )
    p.add_argument("--require-engines", action="store_true", help="fail when TensorRT plans cannot be built")
    p.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from builder.pipeline import BuildOptions, build
    from builder.summary import render

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = build(
        BuildOptions(
            spec_file=args.spec,
            repo=args.repo,
            target=args.target,
            cache_dir=args.cache,
            require_engines=args.require_engines,
            log=log,
        )
    )
    print(render(result))
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="tritonforge",
        description="Build, verify, serve and measure a Triton model repository from models.yaml.",
    )
    subparsers = root.add_subparsers(dest="command", required=True)
    add_build_parser(subparsers)
    for name in COMMANDS:
        importlib.import_module(name).add_parser(subparsers)
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


if __name__ == "__main__":
    sys.exit(main())
