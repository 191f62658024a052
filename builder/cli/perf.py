"""``tritonforge perf MODEL``: perf_analyzer with shapes and real data derived from the spec.

Shapes: every dynamic input gets the first profile's opt shape (ensembles follow their
steps to the core model). Data: a STRING input is fed the core model's calibration
files (real images or sentences), a core model with dynamic inputs its calibration
samples; static numeric models get perf_analyzer's random data (the compute is the same).
An LLM (decoupled, a ``text_input`` string input, as the server's config says) is measured in the
streaming LLM mode with the prompts of ``calibration/<model>/perf.json`` beside the spec.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from builder.cache import StageCache, cache_root
from builder.cli.build import stderr_line
from builder.llm.build import build_llm
from builder.perf_inputs import find_entry, real_input_data, spec_shapes
from builder.records import BuildContext
from builder.spec import Spec, load_spec
from clients.perf.cli import add_arguments
from clients.perf.cli import run as run_sweep
from clients.perf.errors import PerfError

CHECKPOINT_ENV = "TRITONFORGE_LLM_CHECKPOINT"  # an LLM's folder (tokenizer) when no spec names it


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser("perf", help="measure a served model with perf_analyzer (sweep, report, gate)")
    add_arguments(p)
    p.add_argument("--spec", type=Path, default=Path("models.yaml"), help="the spec (default: models.yaml)")
    p.add_argument("--random-data", action="store_true", help="send random data, not calibration samples")
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="stage cache an LLM's tokenizer comes from (default: .tritonforge/cache beside the spec)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.prompts is None:
        args.prompts = llm_prompts_file(args.spec, args.model)
    spec = _maybe_spec(args.spec)
    if args.checkpoint is None:
        args.checkpoint = llm_checkpoint(spec, args.spec, args.model, args.cache)
    entry = find_entry(spec, args.model) if spec else None
    shapes = spec_shapes(spec, entry) if spec and entry else {}
    shapes.update(dict(args.shape))  # --shape wins over the spec
    input_data = args.input_data
    if input_data is None and not args.random_data and spec and entry:
        input_data = real_input_data(spec, args.spec, entry, args.out / f"{args.model}.input_data.json")
    try:
        return run_sweep(args, shapes, input_data)
    except PerfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def llm_checkpoint(
    spec: Spec | None, spec_file: Path, model: str, cache_dir: Path | None = None
) -> Path | None:
    """The checkpoint (its tokenizer renders the prompts) of the spec's LLM of that name, as the
    build made it (from the stage cache: ``cache_dir``, else the spec's own), else the folder
    TRITONFORGE_LLM_CHECKPOINT names."""
    llm = next((m for m in spec.llms if m.name == model), None) if spec else None
    if spec is None or llm is None:
        return Path(os.environ[CHECKPOINT_ENV]) if os.environ.get(CHECKPOINT_ENV) else None
    cache = StageCache(cache_root(spec_file, cache_dir), stderr_line)
    return build_llm(llm, BuildContext(spec, spec_file, spec_file.parent, cache, stderr_line)).checkpoint


def llm_prompts_file(spec_file: Path, model: str) -> Path | None:
    """``calibration/<model>/perf.json`` beside the spec, where the LLM's load prompts live."""
    path = spec_file.parent / "calibration" / model / "perf.json"
    return path if path.is_file() else None


def _maybe_spec(path: Path) -> Spec | None:
    """The spec when there is one; `perf` also works on a server whose spec is elsewhere."""
    return load_spec(path) if path.is_file() else None
