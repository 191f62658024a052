"""``tritonforge tune MODEL --p99-ms N``: the highest-throughput config within a p99 budget.

Starts tritonserver in explicit model-control mode, measures candidates with perf_analyzer,
writes a report and a models.yaml patch (applied with --apply).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from builder.errors import SpecError
from builder.spec import load_spec
from builder.tune import report
from builder.tune.candidates import of_spec, search_space, valid
from builder.tune.search import Limits, search, side_by_side

SEARCH_SHARE = 0.7  # of the time budget; the rest is kept for the side-by-side check


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
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
    return p  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> int:
    from builder.tune.measure import Bench
    from clients.perf.runner import Measurement

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
    out = args.out or Path("tune_results") / args.model
    default = of_spec(model)
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
    log = _log
    for note in space.notes:
        log(f"tune: {note}")
    confirm = None
    scratch = tempfile.TemporaryDirectory(prefix="tritonforge-tune-") if args.work is None else None
    work = args.work or Path(scratch.name)  # type: ignore[union-attr]
    with Bench(spec, spec_file, args.model, work, settings, log=log) as bench:
        log(
            f"tune: {args.model} ({bench.variant.value}) on {bench.server.http_url}, "
            f"p99 <= {args.p99_ms:g} ms"
        )
        result = search(
            space, default, bench.measure, args.p99_ms, limits=limits,
            is_valid=lambda c: valid(spec, args.model, c), clock=time.monotonic,
        )  # fmt: skip
        if not args.no_confirm and result.chosen.candidate != default:
            left = deadline - time.monotonic()
            log(f"tune: side by side, default vs chosen ({left:.0f} s left)")
            confirm = side_by_side(
                default, result.chosen.candidate, bench.measure, args.p99_ms, limits.concurrency
            )
    if scratch is not None:
        scratch.cleanup()
    seconds = time.monotonic() - started
    chosen = result.chosen.candidate
    diff = ""
    new_text = None
    if chosen != default:
        from builder.tune.patch import patch

        new_text, diff = patch(spec_file, args.model, chosen)
    meta: dict[str, Any] = {
        "seconds": round(seconds, 1), "budget_minutes": args.budget_minutes, "cpus": cpus,
        "request_count": args.request_count,
        "stability_percentage": args.stability_percentage, "concurrency": list(limits.concurrency),
        "target": "local", "variant": bench.variant.value, "notes": space.notes,
        "patch_method": "ruamel.yaml round-trip",
    }  # fmt: skip
    meta["confirmed"] = confirm is None or float(confirm["throughput_ratio"]) > 1.0  # type: ignore[arg-type]
    files = report.write(result, args.model, out, confirm, diff, meta)
    print(report.table(result))
    print(f"chosen: {chosen.label}   default: {default.label}   ({seconds:.0f} s)")
    if confirm:
        print(
            f"side by side: throughput x{confirm['throughput_ratio']:.2f}, p99 x{confirm['p99_ratio']:.2f} "
            "(chosen / default)"
        )
    confirmed = meta["confirmed"]
    if diff:
        print(diff)
        if not confirmed:
            print("not confirmed side by side (no gain over the default): the patch is not applied")
        elif args.apply and new_text is not None:
            spec_file.write_text(new_text, encoding="utf-8")
            print(f"applied to {spec_file}")
    else:
        print("the spec's config is already the best found: no patch")
    print(f"report: {files['md']}")
    if result.chosen.best(args.p99_ms) is None:
        print(f"no candidate met p99 <= {args.p99_ms:g} ms", file=sys.stderr)
        return 1
    return 0


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
