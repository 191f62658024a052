"""What a target is: how it serves each kind of model, what it publishes, how it
chooses the variant to serve.

The pipeline, the repository writer and the config writer ask the target object;
no other module names a target. Adding one is a module in this package and a line
in ``builder/targets/__init__.py`` (see docs/targets.md).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
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
from builder.python_models.shared.runtimes import Knobs, Sizing
from builder.records import BATCH_INVARIANCE, EngineSummary, LLMBuild, ModelBuild, VerificationReport
from builder.spec import ONNXRUNTIME, InstanceKind, ModelSpec, Precision, PythonModelSpec, Variant


class TargetOptions(BaseModel):
    """What a model's ``targets.<name>`` may say to every target: ``serve``, the precision it
    serves, or the precisions the fastest of which it serves (unset: the fastest that passed). A
    target with options of its own extends this model (``Target.Options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    serve: Precision | list[Precision] | None = None

    @property
    def precisions(self) -> list[Precision]:
        """The precisions the target may serve; empty: any that passed."""
        if self.serve is None:
            return []
        return list(self.serve) if isinstance(self.serve, list) else [self.serve]

    @property
    def precision(self) -> Precision | None:
        """The one precision named, or None (unset, or a choice of several)."""
        return self.precisions[0] if len(self.precisions) == 1 else None


@dataclass(frozen=True)
class ModelEntry:
    """One model folder of the repository, whatever it serves (a core model's variant, an LLM, a
    Python model, an ensemble): its config, the files of its version folder ``1/`` (an ensemble's
    is empty) and the labels files beside the config. ``builder.targets.writer.write_entry`` writes
    it."""

    config: ModelConfig
    artifacts: dict[str, Path] = field(default_factory=dict)  # built files: name in version folder 1 -> file
    sources: dict[str, Path] = field(default_factory=dict)  # code copied into version folder 1
    texts: dict[str, str] = field(default_factory=dict)  # generated files of version folder 1
    variant: Variant | None = None  # the variant it publishes (None: a fallback or helper model)
    files: dict[str, Path] = field(default_factory=dict)  # the spec's own files (``files:``), linked into 1
    labels: dict[str, str] = field(default_factory=dict)  # labels files beside config.pbtxt: name -> text

    @property
    def name(self) -> str:
        return str(self.config.name)


class Target(ABC):
    """A kind of model repository, and the server that loads it."""

    name: str
    description: str
    builds_engines: bool = False  # TensorRT plans are built for it (where TensorRT and a GPU exist)
    default_instance_kind: InstanceKind = InstanceKind.CPU
    implicit_state: bool = True  # its backends keep a stateful model's states (Triton's implicit state)
    # Its core model can run each row of a request on its own (the local target's onnx_runner): a
    # variant whose answer for a row moves with the rows beside it is served so; elsewhere it is not
    # served at all (refusals).
    runs_rows_alone: bool = False
    # Its served variants' instances and threads are measured here (builder/stages/size.py).
    sizes: bool = False
    Options: ClassVar[type[TargetOptions]] = TargetOptions  # what ``targets.<name>`` takes
    FINALISTS: ClassVar[int] = 3  # the race's variants sized, at most ...
    FINALIST_RATIO: ClassVar[float] = 1.5  # ... of those within this factor of the fastest verified

    def options(self, model: ModelSpec | PythonModelSpec, spec_file: Path | None = None) -> TargetOptions:
        """The model's ``targets.<name>``, read by this target's ``Options``; a one-line SpecError
        naming the field otherwise."""
        try:
            return self.Options.model_validate(model.target_options(self.name))
        except ValidationError as exc:
            error = exc.errors()[0]
            # the fields' names (and list indices), not a union member's type (``str-enum[...]``)
            where = ".".join(str(p) for p in error["loc"] if isinstance(p, int) or str(p).isidentifier())
            field = f"targets.{self.name}" + (f".{where}" if where else "")
            raise SpecError(error["msg"], file=spec_file, model=model.name, field=field) from None

    def knobs(self, model: ModelSpec) -> Knobs:
        """The serving knobs the runtime's parameters are written from (and a variant is verified and
        timed with): every target's ``serve.threads``."""
        return Knobs(threads=model.serve.threads)

    @property
    def serves_spinning(self) -> bool:
        """Whether ONNX Runtime's spinning is an option here (what ``tritonforge tune`` searches)."""
        return "spinning" in self.Options.model_fields

    @abstractmethod
    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        """The model folders a core (ONNX-built) model becomes on this target."""

    @abstractmethod
    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        """The model folders an LLM becomes on this target (its engine, its checkpoint)."""

    @abstractmethod
    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False,
        sizing: Sizing | None = None,
    ) -> ModelConfig:  # fmt: skip
        """The config of one served variant of a core model (also what the tuner rewrites);
        ``alone``: the variant's answer for a row moves with the rows beside it, so every row runs
        on its own (only where ``runs_rows_alone``); ``sizing``: its instances and knobs (None:
        the spec's)."""

    def serves(self, variant: Variant) -> bool:
        """Whether this target's server can run ``variant`` (its runtime, at its precision)."""
        return variant.runtime == ONNXRUNTIME

    def published(self, build: ModelBuild) -> dict[str, Variant]:
        """Model name -> variant: the served one under the spec's name, every other that passed
        verification and that this target publishes beside it as ``<model>_<variant>``."""
        assert build.served is not None
        refused = self.refusals(build)
        names = {build.spec.name: build.served}
        names.update(
            {
                f"{build.spec.name}_{v.name}": v
                for v in build.passed
                if v != build.served and self.beside(v) and v not in refused
            }
        )
        return names

    def refusals(self, build: ModelBuild) -> dict[Variant, str]:
        """The verified variants this target's server runs but that it neither serves nor
        publishes, each with why: a variant whose answer for a row moves with the rows beside it
        (ONNX Runtime's dynamic INT8) where the core model cannot run each row on its own."""
        if self.runs_rows_alone:
            return {}
        return {
            v: rows_move(build.reports[v], self.name)
            for v in build.passed
            if self.serves(v) and not build.reports[v].batch_invariant
        }

    def beside(self, variant: Variant) -> bool:
        """Whether a verified variant that is not served is published beside the served one."""
        return self.serves(variant)

    def finalists(self, build: ModelBuild) -> list[Variant]:
        """The candidates sized for the race: the fastest verified (in-process time at the spec's
        sizing) and those within ``FINALIST_RATIO`` of it, at most ``FINALISTS``."""
        timed = [v for v in self.candidates(build) if build.reports[v].ms_per_sample is not None]
        timed.sort(key=lambda v: build.reports[v].ms_per_sample or 0.0)
        if not timed:
            return []
        limit = (build.reports[timed[0]].ms_per_sample or 0.0) * self.FINALIST_RATIO
        return [v for v in timed if (build.reports[v].ms_per_sample or 0.0) <= limit][: self.FINALISTS]

    def sizings(self, model: ModelSpec, variant: Variant) -> tuple[list[Sizing], list[bool]]:
        """Every sizing the variant's runtime proposes on this host, and which the spec's pins allow
        (``instances.count`` and ``serve.threads`` where the spec sets them); the pinned sizing is
        among them."""
        cores, knobs = os.cpu_count() or 1, self.knobs(model)
        pinned_count = model.instances.count if "count" in model.instances.model_fields_set else None
        every = variant.cpu_runtime.sizings(cores, replace(knobs, threads=0))
        pinned = Sizing(
            pinned_count or 1, replace(knobs, threads=knobs.threads or max(1, cores // (pinned_count or 1)))
        )
        if pinned_count is not None or knobs.threads:
            every = [s for s in every if s != pinned] + [pinned]
        allowed = [
            (pinned_count is None or s.instances == pinned_count)
            and (not knobs.threads or s.knobs.threads == knobs.threads)
            for s in every
        ]
        return every, allowed

    def sizing_of(self, build: ModelBuild, variant: Variant) -> Sizing:
        """The sizing ``variant`` is served at: the one measured best here where it was sized, else
        the spec's (its instances, each with the target's knobs)."""
        if variant in build.sizings:
            return build.sizings[variant].chosen.sizing
        return Sizing(build.spec.instances.count, self.knobs(build.spec))

    def core_entries(self, build: ModelBuild) -> list[tuple[str, Variant, ModelConfig]]:
        """Each published model's name, variant and config."""
        return [
            (
                name,
                v,
                self.core_config(
                    build.spec,
                    name,
                    v,
                    alone=not build.reports[v].batch_invariant,
                    sizing=self.sizing_of(build, v),
                ),
            )
            for name, v in self.published(build).items()
        ]

    def _serving(
        self, cfg: ModelConfig, model: ModelSpec, *, queue_policy: bool, instances: int | None = None
    ) -> ModelConfig:
        """What every core config ends with: batching, instances (the spec's count where
        ``instances`` is None) and warm-up."""
        self._scheduling(cfg, model, queue_policy=queue_policy)
        count = instances if instances is not None else model.instances.count
        set_instances(cfg, count, self.instance_kind(model.instances.kind))
        set_warmup(cfg, model)
        return cfg

    def _scheduling(self, cfg: ModelConfig, model: ModelSpec, *, queue_policy: bool) -> None:
        """The sequence batcher for a stateful model, else dynamic batching."""
        if model.sequence is not None:
            set_sequence_batching(cfg, model.sequence, implicit_state=self.implicit_state)
        else:
            set_batching(cfg, model.batching, model.max_batch_size, queue_policy=queue_policy)

    def writes_queue_policy(self, model: ModelSpec | PythonModelSpec) -> bool:
        """Whether a model's queue policy and priority levels go into its config."""
        return True

    def python_model(self, pm: PythonModelSpec) -> ModelEntry:
        return ModelEntry(python_config(pm, queue_policy=self.writes_queue_policy(pm)))

    def instance_kind(self, kind: InstanceKind) -> str:
        """Triton's instance kind; ``auto`` is this target's default."""
        if kind is InstanceKind.AUTO:
            kind = self.default_instance_kind
        return KIND_GPU if kind is InstanceKind.GPU else KIND_CPU

    def check(self, model: ModelSpec, spec_file: Path) -> None:
        """Refuse a spec this target cannot serve, or options it does not take (raised before any
        stage runs)."""
        for wanted in self.options(model, spec_file).precisions:
            if wanted not in model.precisions:
                raise SpecError(f"'{wanted.value}' is not in precisions", file=spec_file, model=model.name,
                                field=f"targets.{self.name}.serve")  # fmt: skip

    def choose_served(self, build: ModelBuild, spec_file: Path) -> Variant:
        """The fastest that passed among the variants the spec allows this target (its precisions
        for the target, its runtime) and the target serves under the model's name."""
        allowed = self.candidates(build)
        fastest = build.fastest(allowed) or (allowed[0] if allowed else None)
        if fastest is None:
            raise self._none_allowed(build, spec_file)
        return fastest

    def candidates(self, build: ModelBuild) -> list[Variant]:
        refused = self.refusals(build)
        return [v for v in build.passed if self._allowed(build.spec, v) and v not in refused]

    def _allowed(self, model: ModelSpec, variant: Variant) -> bool:
        """Whether this target serves ``variant`` and the spec lets it (its precisions for the
        target, its runtime)."""
        choices, runtime = self.options(model).precisions, model.serve.runtime
        return (
            self.serves(variant)
            and (not choices or variant.precision in choices)
            and runtime in (None, variant.runtime)
        )

    def _none_allowed(self, build: ModelBuild, spec_file: Path) -> VerificationError:
        named = self.options(build.spec).precisions
        failures = [
            f for v, report in build.reports.items() if self._allowed(build.spec, v) for f in report.failures
        ]
        failures += [
            f"{v.name}: {why}" for v, why in self.refusals(build).items() if self._allowed(build.spec, v)
        ]
        return VerificationError(
            f"no variant named for target '{self.name}' passed verification: "
            + ("; ".join(failures) or "none of them is made on this host"),
            file=spec_file,
            model=build.spec.name,
            field=f"targets.{self.name}.serve" if named else "serve.runtime",
        )


def rows_move(report: VerificationReport, target: str) -> str:
    """Why ``target`` does not serve a variant whose answer for a row moves with its mates."""
    return (
        f"its answer for a row moves with the rows beside it ({report.batch_max_diff:.1e} of the row's "
        f"largest value, over {BATCH_INVARIANCE:g}) and the {target} target's backend runs a request's "
        "rows together"
    )


def unknown_targets(model: ModelSpec | PythonModelSpec, known: list[str], spec_file: Path) -> None:
    """``targets.<name>`` must name a registered target."""
    for name in model.targets or {}:
        if name not in known:
            raise SpecError(
                f"unknown target '{name}' (targets: {', '.join(known)})",
                file=spec_file,
                model=model.name,
                field=f"targets.{name}",
            )
