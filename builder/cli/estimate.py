"""``tritonforge estimate``: memory per model and variant against the GPU (or host) memory.

Each LLM of the spec gets its own plan (``builder/estimate/llm.py``): weights, KV cache at the
spec's limits, the KV space configured, the full-length sequences that fit and what to cut first,
for the CPU dtype and, with ``--gpu-memory``, the GPU section's dtype.

With ``--measure`` the CPU estimate of each served model is checked against the resident
memory of the real server (tritonserver plus its Python-backend stubs) with that model
loaded alone, after one request at the profile's max shape; each LLM likewise (the stub's vLLM
engine-core process counted), after max_num_seqs long generations at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from builder.estimate.compare import compare, compare_llms, comparison_table, host_memory, llm_plan, plan
from builder.estimate.llm import advise_llms, llm_table
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
        gpu = int(args.gpu_memory * GIB) if args.gpu_memory is not None else None
        llms = llm_plan(spec, repo, gpu)
        models = {m.name: m for m in spec.models}
        host = int(args.host_memory * GIB) if args.host_memory else host_memory()
        verdicts = advise(rows, host, "cpu", models) if rows else []
        if gpu is not None and rows:
            verdicts += advise(rows, gpu, "gpu", models)
        verdicts += advise_llms(llms, host)
        text = (table(rows) + "\n" if rows else "") + (llm_table(llms) + "\n" if llms else "")
        print(text + "\n".join(verdicts))
        results = compare(rows, repo, spec, log) if args.measure and rows else []
        results += compare_llms(llms, repo, spec, log) if args.measure else []
    if results:
        print()
        print(comparison_table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        out = {"rows": [r.to_dict() for r in rows], "llms": [r.to_dict() for r in llms], "verdicts": verdicts,
               "measured": results}  # fmt: skip
        (args.out / "estimate.json").write_text(json.dumps(out, indent=1) + "\n")
        (args.out / "estimate.md").write_text(
            text + "\n".join(verdicts) + "\n\n" + (comparison_table(results) if results else "")
        )
    fits = all("DOES NOT FIT" not in v for v in verdicts)
    return 0 if fits else 3


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
