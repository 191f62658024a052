"""What a build stage is: one module of this package holding its inputs, its body and the code its
key covers.

A stage turns a model's spec and the artifacts of the stages before it into files in a folder of its
own, run through the stage cache under the key of its declared inputs (``StageInputs``): a stage
whose inputs did not change is skipped, so a rebuild with nothing changed does no work at all. Its
module defines

* an ``Inputs`` model (a ``StageInputs``): what the stage reads, the tools whose versions make its
  artifact (``TOOLS``) and the project modules whose code does (``CODE``: its own module, and what
  it calls by name rather than by import);
* a ``Stage`` object: ``inputs(job)`` and ``run(job, out)``, which writes into ``out`` and returns
  what the cache records.

``builder/pipeline.py`` only conducts: which stages a model runs, in which order, and what their
failures mean. docs/architecture.md ("Adding a stage") shows a new stage.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Protocol

from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from builder import __version__
from builder.cache import StageResult, file_hash, key_of
from builder.failures import guarded
from builder.python_models.shared.runtimes import Knobs
from builder.records import BuildContext
from builder.spec import ModelSpec
from builder.stages.code import code_fingerprint

STAGE_VERSION = 1  # bump when a stage's output format changes

Info = dict[str, object]
Samples = dict[str, NDArray[Any]]


@cache
def tool_version(tool: str) -> str:
    try:
        return metadata.version(tool)
    except metadata.PackageNotFoundError:
        return "absent"


class StageInputs(BaseModel):
    """The inputs of one stage; ``key()`` hashes them with the versions of ``TOOLS`` and the code of
    ``CODE`` (builder/stages/code.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    STAGE: ClassVar[str]
    TOOLS: ClassVar[tuple[str, ...]] = ()
    CODE: ClassVar[tuple[str, ...]] = ()  # the project modules (or packages) that make the artifact

    def key(self) -> str:
        tools = {tool: tool_version(tool) for tool in self.TOOLS}
        code = code_fingerprint(self.CODE)
        return key_of(self.STAGE, STAGE_VERSION, __version__, self.model_dump(mode="json"), tools, code)


class Source(Protocol):
    """What the stages ask of a model's source (``builder.sources``: one object per kind)."""

    def fingerprint(self, model: ModelSpec, spec_dir: Path) -> str: ...

    def load(self, model: ModelSpec, spec_dir: Path, spec_file: Path) -> object: ...

    def reference(
        self, model: ModelSpec, inputs: Samples, *, spec_dir: Path, spec_file: Path, log: Path
    ) -> Samples | None: ...


@dataclass
class ModelJob:
    """One core model's build so far: its spec, the build's context, its source, the knobs its
    target serves it with (its variants are verified and timed so), whether its INT8 graph is made
    for TensorRT (a target that builds plans), and each finished stage by name."""

    model: ModelSpec
    ctx: BuildContext
    source: Source
    knobs: Knobs = field(default_factory=Knobs)
    tensorrt: bool = False
    results: dict[str, StageResult] = field(default_factory=dict)

    def result(self, stage: str) -> StageResult:
        return self.results[stage]

    def sha256(self, stage: str) -> str:
        """The content hash of the graph ``stage`` wrote."""
        return str(self.results[stage].info["sha256"])

    def graph(self, stage: str) -> Path:
        """The graph ``stage`` wrote (``model.onnx`` in its folder)."""
        return self.results[stage].out / GRAPH

    def source_fingerprint(self) -> str:
        return self.source.fingerprint(self.model, self.ctx.spec_dir)


GRAPH = "model.onnx"  # the graph a graph-making stage writes in its folder


class Stage(ABC):
    """One stage (see the module's docstring); ``name`` is its folder in the stage cache."""

    name: str

    @abstractmethod
    def inputs(self, job: ModelJob) -> StageInputs:
        """What the stage reads, from the spec and the results before it."""

    @abstractmethod
    def run(self, job: ModelJob, out: Path) -> Info:
        """Write the artifact into ``out``; what the cache records of it."""


def run_stage(job: ModelJob, stage: Stage) -> StageResult:
    """``stage`` through the stage cache under its inputs' key, its failures sorted (the user's
    input, a refusal of the model, or a defect: builder/failures.py), kept in ``job.results``."""
    model, ctx = job.model.name, job.ctx
    log = ctx.cache.root / model / f"{stage.name}.failure.log"
    body: Callable[[Path], Info] = lambda out: stage.run(job, out)  # noqa: E731
    guard = guarded(body, model=model, stage=stage.name, user_code=ctx.spec_dir, log=log)
    result = ctx.cache.run(model, stage.name, stage.inputs(job).key(), guard)
    job.results[stage.name] = result
    return result


def artifact(path: Path) -> Info:
    """What the cache records of a written file: its hash and size."""
    return {"sha256": file_hash(path), "bytes": path.stat().st_size}


def settle(produced: Path, wanted: Path) -> None:
    """Move a library's output to where the stage keeps it."""
    if produced.resolve() != wanted.resolve():
        shutil.move(produced, wanted)
