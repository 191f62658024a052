"""``tritonforge estimate``: memory per model and variant against the GPU (or host) memory.

With ``--measure`` the CPU estimate of each served model is checked against the resident
memory of the real server (tritonserver plus its Python-backend stubs) with that model
loaded alone, after one request at the profile's max shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from builder.estimate.compare import compare, comparison_table, host_memory, plan
from builder.estimate.plan import GIB, advise, table
from builder.spec import load_spec
from builder.tune.measure import build_local


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "estimate", help="memory plan per model and variant; warns when it does not fit"
    )
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--gpu-memory", type=float, default=None, help="GPU memory in GiB (checks the gpu plan)")
    p.add_argument("--host-memory", type=float, default=None, help="host memory in GiB (default: this host)")
    p.add_argument("--measure", action="store_true", help="check the CPU estimate against the real server")
    p.add_argument("--out", type=Path, default=None, help="write estimate.json / estimate.md here")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    spec_file = args.spec.resolve()
    spec = load_spec(spec_file)
    log = _log
    with tempfile.TemporaryDirectory(prefix="tritonforge-estimate-") as tmp:
        repo = build_local(spec_file, Path(tmp) / "repo", log=lambda _: None)
        rows = plan(spec, repo)
        models = {m.name: m for m in spec.models}
        print(table(rows))
        host = int(args.host_memory * GIB) if args.host_memory else host_memory()
        verdicts = advise(rows, host, "cpu", models)
        if args.gpu_memory is not None:
            verdicts += advise(rows, int(args.gpu_memory * GIB), "gpu", models)
        for line in verdicts:
            print(line)
        results = compare(rows, repo, spec, log) if args.measure else []
    if results:
        print()
        print(comparison_table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "estimate.json").write_text(
            json.dumps(
                {"rows": [r.to_dict() for r in rows], "verdicts": verdicts, "measured": results}, indent=1
            )
            + "\n"
        )
        (args.out / "estimate.md").write_text(
            table(rows) + "\n" + "\n".join(verdicts) + "\n\n" + (comparison_table(results) if results else "")
        )
    fits = all("DOES NOT FIT" not in v for v in verdicts)
    return 0 if fits else 3


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
