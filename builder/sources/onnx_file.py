"""An .onnx file as a model's source: copied as it is (external data embedded); it is its own reference."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from builder.cache import file_hash
from builder.errors import SpecError
from builder.sources.base import InitRequest, Samples, relative
from builder.spec import ModelSpec
from builder.spec.graph import graph_io, load_graph, sample_shapes, spec_entry

FLOAT_TYPES = {"FP32", "FP16", "FP64"}
SUFFIX = ".onnx"


def onnx_path(source: str, model: ModelSpec, *, spec_dir: Path, spec_file: Path) -> Path:
    """``source`` relative to the spec's folder, which must be a file."""
    path = Path(source) if Path(source).is_absolute() else spec_dir / source
    if not path.is_file():
        raise SpecError(f"ONNX file '{path}' not found", file=spec_file, model=model.name, field="source")
    return path


class OnnxFileSource:
    kind = "onnx"
    description = "an .onnx file, relative to the spec (its tensors may be left to the graph)"

    def check_paths(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> None:
        if not (spec_dir / model.source).is_file():
            raise SpecError(
                f"ONNX file '{model.source}' not found", file=spec_file, model=model.name, field="source"
            )

    def fingerprint(self, model: ModelSpec, spec_dir: Path) -> str:
        return file_hash(spec_dir / model.source)

    def load(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> object:
        return onnx_path(model.source, model, spec_dir=spec_dir, spec_file=spec_file)

    def reference(
        self, model: ModelSpec, inputs: Samples, *, spec_dir: Path, spec_file: Path, log: Path
    ) -> Samples | None:
        return None  # the exported graph is the file itself

    def init_entry(self, path: Path, request: InitRequest, spec_file: Path) -> dict[str, Any] | None:
        """The graph's tensors, batching, a profile for its dynamic dims, precisions and tolerances:
        what the build would read from the graph anyway, through the same code."""
        if path.suffix != SUFFIX or not path.is_file():
            return None
        name = request.name or re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem).strip("_") or "model"
        spec_dir = spec_file.parent
        entry: dict[str, Any] = {"name": name, "source": relative(path, spec_dir)}
        io = graph_io(load_graph(entry["source"], spec_dir, spec_file=spec_file, model=name))
        floats = any(t.dtype in FLOAT_TYPES for t in io.inputs + io.outputs)
        precisions = ["fp32", "fp16"] if floats else ["fp32"]
        if request.calibration:
            precisions.append("int8")
            entry["calibration"] = {"data": relative(Path(request.calibration), spec_dir)}
        if request.evaluation:
            entry["evaluation"] = {"data": relative(Path(request.evaluation), spec_dir)}
        entry["precisions"] = precisions
        filled = spec_entry(io, entry, sample_shapes(entry, spec_dir))
        order = ["name", "source", "max_batch_size", "inputs", "outputs", "profiles", "precisions"]
        return {key: filled[key] for key in order if key in filled} | filled
