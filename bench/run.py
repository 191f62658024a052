"""Run the benchmarks, write bench/results/<name>.json and summary.md, print the table.

    .venv/bin/python -m bench.run [--quick] [--only NAME ...]

Every ratio is measured side by side in one run (client, server and model share this machine's
cores; absolute figures drift between runs). ``--quick`` is a ~3-minute smoke version: fewer load
points, shorter windows, no full build. With ``--only`` the table goes to summary_partial.md and
the whole run's summary.md stays as it was.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from typing import Any

from bench.common import CPU_FLAGS, RESULTS, ROOT, Options, Row, machine, save

BENCHMARKS = [
    "serving_efficiency",
    "dynamic_batching",
    "vs_pytriton",
    "vs_per_request",
    "queue_bound",
    "build_time",
    "cpu_runtimes",
    "detection",
    "llm",
    "llm_aiperf",
    "llm_openai_cpu",
    "rerank",
]


def header(info: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    return (
        f"{info['date']} on `{info['host']}`: {info['cpu']}, {info['cores']} cores, "
        f"CPU flags {', '.join(info.get('cpu_flags') or ['none of ' + '/'.join(CPU_FLAGS)])}; "
        f"load average {' / '.join(str(x) for x in info['load_avg'])} at start; "
        f"Python {info['python']}, tritonserver {info['tritonserver']}, {versions}"
    )


def table(rows: list[Row]) -> str:
    lines = ["| benchmark | measured | target | met? |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def summary_name(quick: bool, partial: bool) -> str:
    """Where the table goes: a run of some benchmarks never replaces the whole run's summary."""
    return f"summary{'_quick' if quick else ''}{'_partial' if partial else ''}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke version (~3 minutes)")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this benchmark")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    opts = Options(quick=args.quick)
    info = machine()
    rows: list[Row] = []
    failed = []
    start = time.perf_counter()
    for name in args.only or BENCHMARKS:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            results, got = importlib.import_module(f"bench.{name}").run(opts)
        except Exception as exc:
            traceback.print_exc()
            failed.append(name)
            got = [Row(name, f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", "-", False)]
            results = {"error": traceback.format_exc()}
        seconds = time.perf_counter() - t0
        save(name, {"machine": info, "quick": opts.quick, "seconds": seconds, "rows": [vars(r) for r in got],
                    "results": results})  # fmt: skip
        for r in got:
            print("  " + " | ".join(r.cells()), flush=True)
        rows += got
    info["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - start
    text = (
        f"# Benchmarks{' (quick)' if opts.quick else ''}\n\n{header(info)}; load average at end "
        f"{' / '.join(str(x) for x in info['load_avg_end'])}; total {total / 60:.1f} min.\n\n{table(rows)}\n"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / summary_name(opts.quick, bool(args.only))).write_text(text)
    print("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
