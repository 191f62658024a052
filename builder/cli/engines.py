"""``tritonforge engines``: TensorRT plans for the gpu target, built on this machine.

Into a gpu repository already built (the serving image's, with its manifest.json) it puts
only the plans, built from the stages that build left in the stage cache
(``builder.deploy.plans``): no factory, export or LLM stage runs there. Where no repository
is built yet it runs the whole gpu build, plans included. Where TensorRT or a GPU is
missing it prints one line naming the plans it skipped and why, and exits 0 (2 with
``--require-engines``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from builder.cache import cache_root
from builder.cli.build import stderr_line
from builder.cli.summary import render, report_left_out
from builder.deploy.plans import BuiltRepository, build_plans
from builder.engines.build import EngineSet, EnginesRequired, skip_message
from builder.engines.detect import detect
from builder.pipeline import build
from builder.records import BuildOptions
from builder.spec import load_spec
from builder.targets import engine_target


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("engines", help="build and verify TensorRT plans (on a GPU host)")
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--repo", type=Path, default=Path("model_repository"), help="output repository folder")
    p.add_argument("--cache", type=Path, default=None, help="stage cache (default: .tritonforge/cache)")
    p.add_argument(
        "--if-stale",
        action="store_true",
        help="rebuild only plans whose TensorRT version, GPU, ONNX or options changed",
    )
    p.add_argument("--require-engines", action="store_true", help="exit 2 when a plan cannot be built")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec_file = Path(args.spec).resolve()
    spec = load_spec(spec_file)
    found = detect()
    if not found.available:
        line = skip_message(spec.models, found)
        if args.require_engines:
            print(f"error: {line} (--require-engines)", file=sys.stderr)
            return EnginesRequired.exit_code
        print(line)
        return 0
    cache = cache_root(spec_file, args.cache)
    if not args.if_stale:
        for model in spec.models:
            shutil.rmtree(cache / model.name / "engines", ignore_errors=True)
    built = BuiltRepository.read(args.repo)
    if built is not None:
        built.check(spec_file, engine_target().name)
        engines, _ = build_plans(built, spec, cache, stderr_line, require=args.require_engines)
        print(plans_table(engines))
        return 0
    result = build(
        BuildOptions(
            spec_file=spec_file,
            repo=args.repo,
            target=engine_target().name,
            cache_dir=cache,
            require_engines=args.require_engines,
            log=stderr_line,
        )
    )
    print(render(result))
    return report_left_out(result)


def plans_table(engines: EngineSet) -> str:
    """One line per model: the plan it serves, or why none."""
    lines = []
    for model, results in engines.results.items():
        chosen = engines.chosen(model)
        if chosen is None or chosen.plan is None:
            why = "; ".join(f"{r.precision.value} {r.status.value}" for r in results) or "nothing to build"
            lines.append(f"{model}: no plan ({why})")
        else:
            lines.append(f"{model}: {chosen.precision.value} plan {chosen.plan}")
    return "\n".join(lines)
