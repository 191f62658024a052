"""perf_analyzer's shapes and input data, derived from the spec.

Shapes: every dynamic input gets the first profile's opt shape (ensembles follow their
steps to the core model). Data: a STRING input is fed the core model's calibration
files (real images or sentences), a core model with dynamic inputs its calibration
samples; static numeric models get perf_analyzer's random data (the compute is the same).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.data import load_samples
from builder.spec import EnsembleSpec, ModelSpec, PythonModelSpec, Spec
from clients.perf.inputs import array_entries, bytes_entries, string_entries, write_input_data

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
MAX_SAMPLES = 64  # requests in the --input-data JSON; perf_analyzer cycles through them

AnySpec = ModelSpec | PythonModelSpec | EnsembleSpec


def find_entry(spec: Spec, name: str) -> AnySpec | None:
    return next((m for m in spec.all_models() if m.name == name), None)


def spec_shapes(spec: Spec, entry: AnySpec) -> dict[str, list[int]]:
    """The first profile's opt shape for each dynamic input (through ensemble steps)."""
    if isinstance(entry, ModelSpec):
        return {t.name: list(entry.shape_range(t).opt) for t in entry.inputs if t.dynamic}
    if not isinstance(entry, EnsembleSpec):
        return {}  # Python models have no profiles: the server's config decides, or --shape
    shapes: dict[str, list[int]] = {}
    dynamic = {t.name for t in entry.inputs if t.dynamic}
    for step in entry.steps:
        target = find_entry(spec, step.model)
        for step_input, tensor in step.inputs.items():
            if tensor in dynamic and tensor not in shapes and isinstance(target, ModelSpec):
                t = next(t for t in target.inputs if t.name == step_input)
                shapes[tensor] = list(target.shape_range(t).opt)
    return shapes


def core_model(spec: Spec, entry: AnySpec) -> ModelSpec | None:
    """The ONNX model a request ends up in: itself, an ensemble's first core step, or for a
    Python model the core step of an ensemble that uses it."""
    if isinstance(entry, ModelSpec):
        return entry
    ensembles = [entry] if isinstance(entry, EnsembleSpec) else [
        e for e in spec.ensembles if any(s.model == entry.name for s in e.steps)
    ]  # fmt: skip
    for ens in ensembles:
        for step in ens.steps:
            target = find_entry(spec, step.model)
            if isinstance(target, ModelSpec):
                return target
    return None


def real_input_data(spec: Spec, spec_file: Path, entry: AnySpec, out: Path) -> Path | None:
    """An --input-data JSON from the core model's calibration data, or None for random data."""
    core = core_model(spec, entry)
    if core is None:
        return None
    data = core.calibration or core.evaluation
    if data is None:
        return None
    strings = [t for t in entry.inputs if t.dtype.value == "STRING"]
    if len(strings) == 1 and len(entry.inputs) == 1 and strings[0].dims == [1] and data.data:
        entries = _raw_entries(strings[0].name, spec_file.parent / data.data)
        return write_input_data(entries, out) if entries else None
    if isinstance(entry, ModelSpec) and any(t.dynamic for t in entry.inputs):
        arrays = load_samples(
            data, core, spec_dir=spec_file.parent, spec_file=spec_file, section="calibration"
        )
        return write_input_data(array_entries(arrays, MAX_SAMPLES), out)
    return None


def _raw_entries(name: str, source: Path) -> list[dict[str, Any]]:
    """Images in a folder as BYTES, or sentences in a text file (one a line) as STRING."""
    if source.is_dir():
        images = sorted(p for p in source.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        return bytes_entries(name, (p.read_bytes() for p in images[:MAX_SAMPLES]))
    if source.is_file() and source.suffix == ".txt":
        lines = source.read_text(encoding="utf-8").splitlines()
        texts = [s for s in lines if s.strip() and not s.startswith("#")]
        return string_entries(name, texts[:MAX_SAMPLES])
    return []
