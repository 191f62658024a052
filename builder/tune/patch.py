"""The tuned config as a patch to ``models.yaml``: a unified diff touching only that model.

Edits are textual round-trips with ruamel.yaml (comments, flow maps and key order are
kept; the file is re-emitted byte for byte where nothing changed). Only the model's
``max_batch_size``, ``batching.preferred_batch_sizes``, ``batching.max_queue_delay_us``,
``instances.count`` and ``targets.local.spinning`` are touched, and only where they differ from the
spec. The result is checked by loading it with the real spec loader: every other model must
be unchanged and the tuned one must equal the candidate applied to the spec.
"""

from __future__ import annotations

import difflib
import io
import tempfile
from pathlib import Path
from typing import Any

from builder.spec import load_spec
from builder.targets import served_here
from builder.tune.candidates import Candidate, apply, of_spec

LOCAL = served_here().name  # the target whose runner spins (the one tune measures on)


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def patched_text(text: str, name: str, cand: Candidate) -> str:
    """``text`` (a models.yaml) with model ``name`` set to the candidate's values."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    y = _yaml()
    doc = y.load(text)
    entry = next((m for m in doc.get("models") or [] if m.get("name") == name), None)
    if entry is None:
        raise KeyError(f"model '{name}' is not in the spec's models")
    spec_model = load_spec_text(text).model(name)
    current = of_spec(spec_model)
    if cand.max_batch_size != current.max_batch_size:
        entry["max_batch_size"] = cand.max_batch_size
    batching_changes: dict[str, Any] = {}
    if cand.preferred_batch_sizes != current.preferred_batch_sizes:
        seq = CommentedSeq(cand.preferred_batch_sizes)
        seq.fa.set_flow_style()
        batching_changes["preferred_batch_sizes"] = seq
    if cand.max_queue_delay_us != current.max_queue_delay_us:
        batching_changes["max_queue_delay_us"] = cand.max_queue_delay_us
    if batching_changes:
        batching = entry.get("batching")
        if batching is None:
            batching = CommentedMap()
            batching.fa.set_flow_style()
            _insert_after(entry, "batching", batching, "max_batch_size")
        for key, value in batching_changes.items():
            if key in batching:
                batching[key] = value
            else:
                batching.insert(_position(batching, key), key, value)
    if cand.instances != current.instances:
        instances = entry.get("instances")
        if instances is None:
            instances = CommentedMap()
            instances.fa.set_flow_style()
            _insert_after(entry, "instances", instances, "batching")
        instances["count"] = cand.instances
    if cand.spinning != current.spinning:
        _set_spinning(entry, cand.spinning)
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


def patch(spec_file: Path, name: str, cand: Candidate) -> tuple[str, str]:
    """(new text, unified diff) for ``spec_file``; checked with the spec loader."""
    text = spec_file.read_text(encoding="utf-8")
    new = patched_text(text, name, cand)
    check(text, new, name, cand)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), new.splitlines(keepends=True),
            fromfile=f"a/{spec_file.name}", tofile=f"b/{spec_file.name}",
        )
    )  # fmt: skip
    return new, diff


def check(old: str, new: str, name: str, cand: Candidate) -> None:
    """The patched spec differs from the old one only in the tuned model, by the candidate."""
    before, after = load_spec_text(old), load_spec_text(new)
    for kind in ("models", "python_models", "ensembles"):
        for a, b in zip(getattr(before, kind), getattr(after, kind), strict=True):
            if a.name == name and kind == "models":
                if b != apply(a, cand):
                    raise AssertionError(f"patched '{name}' is not the candidate {cand.label}")
            elif a != b:
                raise AssertionError(f"the patch changed '{a.name}', which was not tuned")


def load_spec_text(text: str) -> Any:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "models.yaml"
        path.write_text(text, encoding="utf-8")
        return load_spec(path)


_BATCHING_ORDER = ("enabled", "preferred_batch_sizes", "max_queue_delay_us", "preserve_ordering", "queue")


def _position(batching: Any, key: str) -> int:
    """Where ``key`` goes in a batching map: in the spec's field order, before later fields."""
    rank = _BATCHING_ORDER.index(key)
    for i, existing in enumerate(batching):
        if existing in _BATCHING_ORDER and _BATCHING_ORDER.index(existing) > rank:
            return i
    return len(batching)


def _set_spinning(entry: Any, spinning: bool | None) -> None:
    """``targets.local.spinning`` set (a new ``targets`` map goes after ``warmup`` or
    ``instances``), or removed for None, with the maps left empty by it."""
    from ruamel.yaml.comments import CommentedMap

    targets = entry.get("targets")
    local = targets.get(LOCAL) if targets is not None else None
    if spinning is None:
        if local is not None:
            local.pop("spinning", None)
            if not local:
                del targets[LOCAL]
            if not targets:
                del entry["targets"]
        return
    if targets is None:
        targets = CommentedMap()
        _insert_after(entry, "targets", targets, "warmup" if "warmup" in entry else "instances")
    if local is None:
        local = targets[LOCAL] = CommentedMap()
        local.fa.set_flow_style()
    local["spinning"] = spinning


def _insert_after(entry: Any, key: str, value: Any, after: str) -> None:
    keys = list(entry)
    pos = keys.index(after) + 1 if after in keys else len(keys)
    entry.insert(pos, key, value)
