"""A Hugging Face checkpoint folder and its task as a model's source.

When the spec is loaded, ``builder.spec.checkpoint`` reads the folder and its task
(``builder.tasks``) fills in the core model's tensors and adds its Python-backend models
(``<name>_preprocess``, ``<name>_postprocess``) and ensemble (``<name>_pipeline``). The build
exports the task's module (``builder.stages.checkpoint``) and runs it for the reference.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from builder.cache import tree_hash
from builder.errors import SpecError
from builder.sources.base import InitRequest, Samples, relative, torch_outputs
from builder.spec import ModelSpec
from builder.spec.checkpoint import read_checkpoint, task_of
from builder.stages.checkpoint import checkpoint_module
from builder.tasks import names


class CheckpointSource:
    kind = "checkpoint"
    description = "a Hugging Face checkpoint folder with a task (its tokenizer or image processor served too)"

    def check_paths(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> None:
        return None  # the folder was read when the spec was loaded

    def fingerprint(self, model: ModelSpec, spec_dir: Path) -> str:
        return f"{model.task}:{tree_hash(spec_dir / model.source)}"

    def load(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> object:
        return checkpoint_module(model, spec_dir)

    def reference(
        self, model: ModelSpec, inputs: Samples, *, spec_dir: Path, spec_file: Path, log: Path
    ) -> Samples | None:
        return torch_outputs(model, lambda: self.load(model, spec_dir, spec_file), inputs, log)

    def init_entry(self, path: Path, request: InitRequest, spec_file: Path) -> dict[str, Any] | None:
        """``{name, source, task}``: the task from the request or ``config.architectures``; the
        tensors, Python models and ensemble follow from the folder when the spec is loaded."""
        if not path.is_dir():
            return None
        if not (path / "config.json").is_file():
            raise SpecError("no config.json: not a Hugging Face checkpoint folder", file=path)
        named = task_of(path / "config.json")
        task = request.task or (named.name if named is not None else None)
        if task is None:
            raise SpecError(
                f"names no single task; give --task ({names()})",
                file=path / "config.json",
                field="architectures",
            )
        spec_dir = spec_file.parent
        name = request.name or re.sub(r"[^A-Za-z0-9_-]+", "_", path.resolve().name).strip("_") or "model"
        entry: dict[str, Any] = {"name": name, "source": relative(path, spec_dir), "task": task}
        if request.calibration:
            entry["precisions"] = ["fp32", "int8"]
            entry["calibration"] = {"data": relative(Path(request.calibration), spec_dir)}
        if request.evaluation:
            entry["evaluation"] = {"data": relative(Path(request.evaluation), spec_dir)}
        read_checkpoint(entry, spec_dir, spec_file=spec_file)  # the folder and its task, checked now
        return entry
