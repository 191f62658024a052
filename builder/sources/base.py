"""What a model source is to the build: the one protocol every kind of ``source`` implements.

A source kind (an ONNX file, a PyTorch factory, a Hugging Face checkpoint) is one object in one
module of ``builder/sources/``; the pipeline, the export stage and ``tritonforge init`` ask it and
never name a kind. What the spec reads from a source when it is loaded (an ONNX graph's tensors in
``builder/spec/graph.py``; a checkpoint folder in ``builder/spec/checkpoint.py``, whose task in
``builder/tasks/`` composes its tensors, pre/post-processing models and ensemble) stays below the
stages, in ``builder/spec`` and the tasks it calls, the layers every other one reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from numpy.typing import NDArray

from builder.progress import quiet
from builder.spec import ModelSpec
from builder.stages.export import torch_reference

Samples = dict[str, NDArray[Any]]


@dataclass(frozen=True)
class InitRequest:
    """What ``tritonforge init`` was asked for, besides the path."""

    name: str | None = None
    task: str | None = None
    calibration: str | None = None
    evaluation: str | None = None


class ModelSource(Protocol):
    """One kind of ``models:`` source."""

    kind: str  # its name in SOURCES, a ModelSourceKind's value (what entries of this kind record)
    description: str

    def check_paths(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> None:
        """A one-line SpecError for a file the stages would miss, before any stage runs."""
        ...

    def fingerprint(self, model: ModelSpec, spec_dir: Path) -> str:
        """What the export and reference stage keys change with: the files the source reads."""
        ...

    def load(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> object:
        """What the export stage writes as ONNX: a ``torch.nn.Module``, an ``onnx.ModelProto`` or
        the ``Path`` of an .onnx file."""
        ...

    def reference(
        self, model: ModelSpec, inputs: Samples, *, spec_dir: Path, spec_file: Path, log: Path
    ) -> Samples | None:
        """The source model's own outputs on ``inputs`` (third-party output to ``log``); None when
        the exported graph is the source model, and so the reference."""
        ...

    def init_entry(self, path: Path, request: InitRequest, spec_file: Path) -> dict[str, Any] | None:
        """The ``models:`` entry ``tritonforge init PATH`` writes, or None when PATH is not of this kind."""
        ...


def relative(path: Path, folder: Path) -> str:
    """``path`` as a spec beside ``folder`` writes it."""
    return Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()


def torch_outputs(model: ModelSpec, load: Callable[[], object], inputs: Samples, log: Path) -> Samples | None:
    """What ``load()`` returns, run on ``inputs`` where it is a torch module (None otherwise);
    what loading and running print goes to ``log``."""
    with quiet(log):  # torch's and transformers' own output
        return torch_reference(model, load(), inputs)
