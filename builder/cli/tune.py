"""``tritonforge tune MODEL --p99-ms N``: the highest-throughput config within a p99 budget.

Starts tritonserver in explicit model-control mode, measures candidates with perf_analyzer,
writes a report and a models.yaml patch (applied with --apply).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.cli.build import stderr_line
from builder.errors import SpecError
from builder.spec import Spec, load_spec
from builder.targets import served_here
from builder.tune import report
from builder.tune.candidates import Candidate, SearchSpace, of_spec, search_space, valid
from builder.tune.measure import Bench
from builder.tune.patch import patch
from builder.tune.search import Limits, SearchResult, search, side_by_side
from clients.perf.runner import Measurement

SEARCH_SHARE = 0.7  # of the time budget; the rest is kept for the side-by-side check


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser("tune", help="find the highest-throughput config within a p99 latency budget")
    p.add_argument("model", help="a core model of the spec")
    p.add_argument("--p99-ms", type=float, required=True, help="p99 latency budget in milliseconds")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="load levels")
    p.add_argument("--budget-minutes", type=float, default=15.0, help="wall-clock budget for the whole run")
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: tune_results/MODEL)")
    p.add_argument("--request-count", type=int, default=100, help="perf_analyzer requests per window")
    p.add_argument(
        "--stability-percentage", type=int, default=100, help="perf_analyzer's window agreement (noisy hosts)"
    )
    p.add_argument("--delays-us", type=int, nargs="+", default=None, help="queue delays to try (us)")
    p.add_argument("--max-instances", type=int, default=None, help="highest instance count to try")
    p.add_argument("--no-confirm", action="store_true", help="skip the side-by-side run against the default")
    p.add_argument("--apply", action="store_true", help="write the patch into the spec")
    p.add_argument(
        "--work", type=Path, default=None, help="keep the scratch repository, logs and raw CSVs here"
    )
    p.set_defaults(func=run)
    return p


@dataclass(frozen=True)
class TunePlan:
    """What one tuning run will do, checked before any server starts."""

    spec: Spec
    spec_file: Path
    model: str
    space: SearchSpace
    default: Candidate
    limits: Limits
    settings: Measurement
    deadline: float
    started: float
    cpus: int


@dataclass(frozen=True)
class TuneOutcome:
    result: SearchResult
    variant: str
    confirm: dict[str, object] | None
    seconds: float
    default: Candidate  # where the search started: the spec's config at the build's sizing


def run(args: argparse.Namespace) -> int:
    plan = make_plan(args)
    outcome = execute(plan, args)
    return write_report(plan, outcome, args)


def make_plan(args: argparse.Namespace) -> TunePlan:
    started = time.monotonic()
    deadline = started + args.budget_minutes * 60
    spec_file = args.spec.resolve()
    spec = load_spec(spec_file)
    try:
        model = spec.model(args.model)
    except KeyError:
        raise SpecError(f"'{args.model}' is not a core model of the spec", file=spec_file) from None
    if args.p99_ms <= 0 or min(args.concurrency) < 1:
        raise SpecError("--p99-ms and --concurrency must be positive", file=spec_file, model=args.model)
    cpus = len(os.sched_getaffinity(0))
    kwargs: dict[str, Any] = {"cpus": cpus, "budget_ms": args.p99_ms}
    if args.delays_us:
        kwargs["delays_us"] = args.delays_us
    if args.max_instances:
        kwargs["max_instances"] = args.max_instances
    try:
        space = search_space(spec, args.model, **kwargs)
    except ValueError as exc:
        raise SpecError(str(exc), file=spec_file, model=args.model) from None
    confirm_share = 0.0 if args.no_confirm else 1 - SEARCH_SHARE
    limits = Limits(
        concurrency=tuple(sorted(set(args.concurrency))),
        deadline_s=deadline - confirm_share * args.budget_minutes * 60,
    )
    settings = Measurement(
        request_count=args.request_count,
        stability_percentage=args.stability_percentage,
        retries=1,
        max_trials=6,
    )
    return TunePlan(
        spec, spec_file, args.model, space, of_spec(model), limits, settings, deadline, started, cpus
    )


def execute(plan: TunePlan, args: argparse.Namespace) -> TuneOutcome:
    """The search on a real server, then (unless --no-confirm) both configs side by side."""
    for note in plan.space.notes:
        stderr_line(f"tune: {note}")
    confirm = None
    with tempfile.TemporaryDirectory(prefix="tritonforge-tune-") as scratch:
        work = args.work or Path(scratch)
        with Bench(plan.spec, plan.spec_file, plan.model, work, plan.settings, log=stderr_line) as bench:
            stderr_line(f"tune: {plan.model} ({bench.variant.name}) on {bench.server.http_url}, "
                        f"p99 <= {args.p99_ms:g} ms")  # fmt: skip
            default = as_built(plan, bench.sized_instances)
            result = search(
                plan.space, default, bench.measure, args.p99_ms, limits=plan.limits,
                is_valid=lambda c: valid(plan.spec, plan.model, c), clock=time.monotonic,
            )  # fmt: skip
            if not args.no_confirm and result.chosen.candidate != default:
                stderr_line(
                    f"tune: side by side, default vs chosen ({plan.deadline - time.monotonic():.0f} s left)"
                )
                confirm = side_by_side(
                    default, result.chosen.candidate, bench.measure, args.p99_ms, plan.limits.concurrency
                )
            variant = bench.variant.name
    return TuneOutcome(result, variant, confirm, time.monotonic() - plan.started, default)


def as_built(plan: TunePlan, sized_instances: int | None) -> Candidate:
    """The search's start: the spec's config, at the instances the build sized the served variant
    at where the spec pins none (the build measures in process at concurrency 1 and 8; tune then
    measures the served batching on the real server)."""
    pinned = "count" in plan.spec.model(plan.model).instances.model_fields_set
    if sized_instances is None or pinned or sized_instances == plan.default.instances:
        return plan.default
    stderr_line(f"tune: starting from the build's sizing, {sized_instances} instance(s)")
    return dataclasses.replace(plan.default, instances=sized_instances)


def write_report(plan: TunePlan, outcome: TuneOutcome, args: argparse.Namespace) -> int:
    result, confirm = outcome.result, outcome.confirm
    chosen = result.chosen.candidate
    new_text, diff = patch(plan.spec_file, plan.model, chosen) if chosen != plan.default else (None, "")
    default = outcome.default
    confirmed = confirm is None or _ratio(confirm, "throughput_ratio") > 1.0
    meta: dict[str, Any] = {
        "seconds": round(outcome.seconds, 1), "budget_minutes": args.budget_minutes, "cpus": plan.cpus,
        "request_count": args.request_count,
        "stability_percentage": args.stability_percentage, "concurrency": list(plan.limits.concurrency),
        "target": served_here().name, "variant": outcome.variant, "notes": plan.space.notes,
        "patch_method": "ruamel.yaml round-trip", "confirmed": confirmed,
    }  # fmt: skip
    files = report.write(
        result, plan.model, args.out or Path("tune_results") / plan.model, confirm, diff, meta
    )
    print(report.table(result))
    print(f"chosen: {chosen.label}   default: {default.label}   ({outcome.seconds:.0f} s)")
    if confirm:
        print(f"side by side: throughput x{_ratio(confirm, 'throughput_ratio'):.2f}, "
              f"p99 x{_ratio(confirm, 'p99_ratio'):.2f} (chosen / default)")  # fmt: skip
    if diff:
        print(diff)
        if not confirmed:
            print("not confirmed side by side (no gain over the default): the patch is not applied")
        elif args.apply and new_text is not None:
            plan.spec_file.write_text(new_text, encoding="utf-8")
            print(f"applied to {plan.spec_file}")
    else:
        print("the spec's config is already the best found: no patch")
    print(f"report: {files['md']}")
    if result.chosen.best(args.p99_ms) is None:
        print(f"no candidate met p99 <= {args.p99_ms:g} ms", file=sys.stderr)
        return 1
    return 0


def _ratio(confirm: dict[str, object], key: str) -> float:
    value = confirm.get(key)
    return float(value) if isinstance(value, (int, float)) else float("nan")
