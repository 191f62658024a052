"""``tritonforge init <model.onnx | checkpoint folder>``: a spec entry read from the graph (or the
checkpoint's task), printed or appended to a spec.

The entry states what the build would read from the graph anyway (tensors, batching, a profile for
the dynamic dims, precisions and their tolerances), through the same code, so it builds as written
and is there to edit. Nothing is written unless the whole spec, entry included, is valid.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from builder.errors import SpecError
from builder.sources import SOURCES, InitRequest
from builder.spec import ModelSourceKind, load_spec
from builder.spec.kinds import model_source_kind
from builder.spec.probe import probe_record
from builder.spec.variant import runtime_names
from builder.tasks import TASKS


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("init", help="write a spec entry for an ONNX file or a Hugging Face checkpoint")
    p.add_argument("model", type=Path, help="the .onnx file, or a Hugging Face checkpoint folder")
    p.add_argument("--task", choices=list(TASKS), help="a checkpoint's task (default: config.json's)")
    p.add_argument("--name", help="the model's name (default: the file's name)")
    p.add_argument(
        "--calibration",
        help="an .npz of samples (for a checkpoint: a text file, one text a line, or a folder of images): "
        "adds the int8 variant, calibrated on it",
    )
    p.add_argument("--evaluation", help="an .npz of samples the variants are verified on (default: random)")
    p.add_argument(
        "--runtime",
        choices=runtime_names(),
        help="verify and serve on this runtime only (default: every runtime, the fastest verified serves)",
    )
    p.add_argument(
        "--append", type=Path, metavar="SPEC", help="append to this models.yaml instead of printing"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec_file: Path = args.append.resolve() if args.append else Path.cwd() / "models.yaml"
    entry = make_entry(args, spec_file)
    _say_probed(entry, spec_file)
    text = yaml.safe_dump([entry], sort_keys=False, default_flow_style=None, width=100)
    if args.append is None:
        _validated(f"models:\n{_indented(text)}", spec_file)
        sys.stdout.write(f"models:\n{_indented(text)}")
        return 0
    _append(spec_file, entry["name"], _indented(text))
    print(f"{spec_file}: model '{entry['name']}' appended")
    return 0


def make_entry(args: argparse.Namespace, spec_file: Path) -> dict[str, Any]:
    """The entry for ``args.model`` from the source kind that reads such a path, its paths
    relative to the spec's folder."""
    request = InitRequest(args.name, args.task, args.calibration, args.evaluation)
    for source in SOURCES.values():
        entry = source.init_entry(args.model, request, spec_file)
        if entry is not None:
            return _pinned(entry, getattr(args, "runtime", None))
    raise SpecError("no such .onnx file", file=args.model)


def _pinned(entry: dict[str, Any], runtime: str | None) -> dict[str, Any]:
    """With ``--runtime``, the entry's variants are made on that runtime alone."""
    return entry if runtime is None else {**entry, "runtimes": [runtime]}


def _say_probed(entry: dict[str, Any], spec_file: Path) -> None:
    """On stderr, the profile shape ONNX Runtime was probed for (or that none tried ran)."""
    source, checkpoint = entry.get("source"), "task" in entry
    if isinstance(source, str) and model_source_kind(source, checkpoint=checkpoint) is ModelSourceKind.ONNX:
        probe = probe_record(spec_file.parent / source, str(entry["name"]))
        if probe is not None:
            print(f"{spec_file}: model '{entry['name']}': {probe.describe()}", file=sys.stderr)


def _indented(text: str) -> str:
    return "".join(f"  {line}" if line.strip() else line for line in text.splitlines(keepends=True))


def _append(spec_file: Path, name: str, entry_text: str) -> None:
    """Append under the file's ``models:`` section, which must come last so that its comments and
    layout stay as they are; the result is validated before it replaces the file."""
    if not spec_file.is_file():
        _replace(spec_file, _validated(f"models:\n{entry_text}", spec_file))
        return
    text = spec_file.read_text(encoding="utf-8")
    raw = yaml.safe_load(text) or {}
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, list):
        raise SpecError("no 'models:' list to append to", file=spec_file, field="models")
    if any(isinstance(m, dict) and m.get("name") == name for m in models):
        raise SpecError(f"a model named '{name}' exists already (choose another with --name)", file=spec_file)
    top = [line.split(":")[0] for line in text.splitlines() if re.match(r"^[A-Za-z_]\w*\s*:", line)]
    if not top or top[-1] != "models":
        raise SpecError("'models:' must be the file's last section to append to it", file=spec_file)
    joined = text if text.endswith("\n") else text + "\n"
    _replace(spec_file, _validated(joined + entry_text, spec_file))


def _validated(text: str, spec_file: Path) -> str:
    """``text`` if it loads as a valid spec beside ``spec_file`` (so relative paths resolve)."""
    folder = spec_file.parent
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=folder, delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        load_spec(f.name)
    except SpecError as exc:
        raise SpecError(exc.message, file=spec_file, model=exc.model, field=exc.field) from None
    finally:
        Path(f.name).unlink(missing_ok=True)
    return text


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
