"""What a target is: how it serves each kind of model, what it publishes, how it
chooses the variant to serve.

The pipeline, the repository writer and the config writer ask the target object;
no other module names a target. Adding one is a module in this package and a line
in ``builder/targets/__init__.py`` (see docs/targets.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import (
    KIND_CPU,
    KIND_GPU,
    python_config,
    set_batching,
    set_instances,
    set_sequence_batching,
    set_warmup,
)
from builder.errors import SpecError, VerificationError
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import Batching, InstanceKind, ModelSpec, Precision, PythonModelSpec


@dataclass(frozen=True)
class ModelEntry:
    """One model folder of the repository: its config and the files of its version folder."""

    config: ModelConfig
    artifacts: dict[str, Path] = field(default_factory=dict)  # built files: name in version folder 1 -> file
    sources: dict[str, Path] = field(default_factory=dict)  # code copied into version folder 1
    texts: dict[str, str] = field(default_factory=dict)  # generated files of version folder 1
    variant: Precision | None = None  # the variant it publishes (None: a fallback or helper model)

    @property
    def name(self) -> str:
        return str(self.config.name)


class Target(ABC):
    """A kind of model repository, and the server that loads it."""

    name: str
    description: str
    builds_engines: bool = False  # TensorRT plans are built for it (where TensorRT and a GPU exist)
    default_instance_kind: InstanceKind = InstanceKind.CPU
    serves_spinning: bool = False  # its configs carry serve.spinning (the onnx_runner's allow_spinning)
    implicit_state: bool = True  # its backends keep a stateful model's states (Triton's implicit state)

    @abstractmethod
    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        """The model folders a core (ONNX-built) model becomes on this target."""

    @abstractmethod
    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        """The model folders an LLM becomes on this target (its engine, its checkpoint)."""

    @abstractmethod
    def core_config(self, model: ModelSpec, name: str, variant: Precision) -> ModelConfig:
        """The config of one served variant of a core model (also what the tuner rewrites)."""

    def published(self, build: ModelBuild) -> dict[str, Precision]:
        """Model name -> variant: the served one under the spec's name, every other that
        passed verification as ``<model>_<precision>``."""
        assert build.served is not None
        names = {build.spec.name: build.served}
        names.update({f"{build.spec.name}_{p.value}": p for p in build.passed if p is not build.served})
        return names

    def _serving(self, cfg: ModelConfig, model: ModelSpec, *, queue_policy: bool) -> ModelConfig:
        """What every core config ends with: batching, instances and warm-up."""
        self._scheduling(cfg, model, queue_policy=queue_policy)
        set_instances(cfg, model.instances.count, self.instance_kind(model.instances.kind))
        set_warmup(cfg, model)
        return cfg

    def _scheduling(self, cfg: ModelConfig, model: ModelSpec, *, queue_policy: bool) -> None:
        """The sequence batcher for a stateful model, else dynamic batching."""
        if model.sequence is not None:
            set_sequence_batching(cfg, model.sequence, implicit_state=self.implicit_state)
        else:
            set_batching(cfg, model.batching, model.max_batch_size, queue_policy=queue_policy)

    def writes_queue_policy(self, batching: Batching) -> bool:
        """Whether a model's queue policy and priority levels go into its config."""
        return True

    def python_model(self, pm: PythonModelSpec) -> ModelEntry:
        return ModelEntry(python_config(pm, queue_policy=self.writes_queue_policy(pm.batching)))

    def instance_kind(self, kind: InstanceKind) -> str:
        """Triton's instance kind; ``auto`` is this target's default."""
        if kind is InstanceKind.AUTO:
            kind = self.default_instance_kind
        return KIND_GPU if kind is InstanceKind.GPU else KIND_CPU

    def check(self, model: ModelSpec, spec_file: Path) -> None:
        """Refuse a spec this target cannot serve (raised before any stage runs)."""
        return None  # most targets serve every valid spec

    def choose_served(self, build: ModelBuild, spec_file: Path) -> Precision:
        """The variant the spec names for this target, else the fastest that passed."""
        wanted = build.spec.serve.variant(self.name)
        if wanted is not None:
            return self._named(build, wanted, spec_file)
        return build.fastest(build.passed) or build.passed[0]

    def _named(self, build: ModelBuild, wanted: Precision, spec_file: Path) -> Precision:
        if wanted not in build.passed:
            raise VerificationError(
                f"the variant named for target '{self.name}' did not pass verification: "
                f"{'; '.join(build.reports[wanted].failures)}",
                file=spec_file,
                model=build.spec.name,
                field=f"serve.{self.name}",
            )
        return wanted


def unknown_serve_targets(model: ModelSpec, known: list[str], spec_file: Path) -> None:
    """``serve.<name>`` must name a registered target."""
    for name in model.serve.variants():
        if name not in known:
            raise SpecError(
                f"unknown target '{name}' (targets: {', '.join(known)})",
                file=spec_file,
                model=model.name,
                field=f"serve.{name}",
            )
