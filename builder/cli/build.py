"""``tritonforge build``: build and publish a model repository from models.yaml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.cli.summary import render, report_left_out
from builder.pipeline import build
from builder.records import BuildOptions
from builder.targets import TARGETS


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("build", help="build and publish a model repository from models.yaml")
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--repo", type=Path, default=Path("model_repository"), help="output repository folder")
    described = "; ".join(f"{t.name}: {t.description}" for t in TARGETS.values())
    p.add_argument(
        "--target",
        choices=("auto", *TARGETS),
        default="auto",
        help=f"{described}; auto: one that builds engines where TensorRT and a GPU exist, else local",
    )
    p.add_argument(
        "--cache", type=Path, default=None, help="stage cache (default: .tritonforge/cache beside the spec)"
    )
    p.add_argument("--require-engines", action="store_true", help="fail when TensorRT plans cannot be built")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = build(
        BuildOptions(
            spec_file=args.spec,
            repo=args.repo,
            target=args.target,
            cache_dir=args.cache,
            require_engines=args.require_engines,
            log=stderr_line,
        )
    )
    print(render(result))
    return report_left_out(result)


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
