"""A factory (``package.module:function`` importable from the spec's folder) as a model's source.

It may return a ``torch.nn.Module`` (exported, and run for the reference), an ``onnx.ModelProto``
or the path of an .onnx file (both their own reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from builder.errors import SpecError
from builder.factories import import_factory
from builder.sources.base import InitRequest, Samples, torch_outputs
from builder.sources.onnx_file import onnx_path
from builder.spec import ModelSpec
from builder.stages.export import is_torch_module
from builder.stages.fingerprints import module_fingerprint


class FactorySource:
    kind = "factory"
    description = "package.module:function, returning a torch.nn.Module, an onnx.ModelProto or an .onnx path"

    def check_paths(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> None:
        return None  # the module is found when the export stage imports it

    def fingerprint(self, model: ModelSpec, spec_dir: Path) -> str:
        return module_fingerprint(model.source, spec_dir)

    def load(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> object:
        ref = model.source
        obj = import_factory(ref, spec_dir, spec_file=spec_file, model=model.name, field="source")()
        if isinstance(obj, (str, Path)) and str(obj).endswith(".onnx"):
            return onnx_path(str(obj), model, spec_dir=spec_dir, spec_file=spec_file)
        if isinstance(obj, onnx.ModelProto) or is_torch_module(obj):
            return obj
        raise SpecError(
            f"factory '{model.source}' returned {type(obj).__name__}; expected a torch.nn.Module, "
            "an onnx.ModelProto or the path of an .onnx file",
            file=spec_file,
            model=model.name,
            field="source",
        )

    def reference(
        self, model: ModelSpec, inputs: Samples, *, spec_dir: Path, spec_file: Path, log: Path
    ) -> Samples | None:
        return torch_outputs(model, lambda: self.load(model, spec_dir, spec_file), inputs, log)

    def init_entry(self, path: Path, request: InitRequest, spec_file: Path) -> dict[str, Any] | None:
        return None  # a factory is code, not a path to read an entry from
