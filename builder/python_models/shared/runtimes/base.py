"""What a CPU runtime is to tritonforge: one object, in one module of this package.

The same ONNX graph runs several times faster on one CPU runtime than another (OpenVINO's bf16 on
AMX against ONNX Runtime's fp32), so a runtime is part of a served variant, verified and timed like
its precision. A runtime owns everything about itself:

* ``precisions``: the precisions it runs, each with what it must report computing in and the CPU
  flags it needs (any one of them);
* ``distribution``: the package whose version is in every verification's cache key;
* ``stub_memory``: what one served instance holds before its model's own bytes (the memory plan);
* ``open``: the only way anything opens a session of a graph on it (the build's stages, the served
  ``onnx_runner`` and ``onnx_sequence`` models, the benchmarks), from the same string parameters
  the ``local`` target writes into the served model's config, so that what the build verifies and
  times is what the server runs;
* ``parameters``: those parameters, from the spec's serving knobs;
* ``container``: the backend of the official tritonserver container that serves it (the ``cpu``
  target), or None.

This package is copied into served models (``onnx_runner`` and ``onnx_sequence`` link to it as
their ``runtimes`` subpackage), so it imports nothing of the project, its modules import each other
relatively, and each runtime imports its library only when it opens a session.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Protocol

from numpy.typing import NDArray

# Parameters every runtime reads (string values, as Triton's config parameters are).
PRECISION = "precision"  # the variant's precision (fp32, bf16, int8...)
INTRA_OP_THREADS = "intra_op_threads"  # one session's threads; "0" or unset: the cores shared out

# The CPU flags any one of which runs bfloat16 arithmetic natively (AVX-512 BF16, AMX).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")

Feed = Mapping[str, NDArray[Any]]


class Session(Protocol):
    """A graph opened on a runtime."""

    inputs: list[tuple[str, Any]]  # each input's name and the numpy type it takes (None: any)
    output_names: list[str]
    computed_in: str | None  # the precision the runtime reports it computes in (None: as the graph says)

    def run(self, names: Sequence[str] | None, feed: Feed) -> list[NDArray[Any]]:
        """The named outputs (None: every output, in the graph's order) for ``feed``."""
        ...


@dataclass(frozen=True)
class Runs:
    """How a runtime runs one precision: what its session must report computing in (read back,
    never assumed) and the CPU flags it needs, any one of them (empty: none)."""

    computes: str | None = None  # None: each node in its graph's types
    needs: frozenset[str] = frozenset()


class RuntimeRefused(Exception):
    """This host cannot run a precision on the runtime: the library cannot be imported, the CPU
    lacks the instructions, or the runtime refuses the graph. One line, said in the build's
    summary; the variant is left out."""


@dataclass(frozen=True)
class Knobs:
    """The serving knobs a runtime turns into its parameters: ``threads`` per session (0: the
    machine's cores shared out among the instances); for ONNX Runtime whether idle workers spin
    (None: only where the instances leave a core free); for OpenVINO its performance hint and
    streams (None: LATENCY, one stream)."""

    threads: int = 0
    spinning: bool | None = None
    hint: str | None = None
    streams: int | None = None


@dataclass(frozen=True)
class Sizing:
    """How a served variant runs: its instances (each a process of its own, one call at a time)
    and each one's knobs."""

    instances: int
    knobs: Knobs

    @property
    def label(self) -> str:
        """``2 x 1 thread``, ``1 x 2 threads THROUGHPUT/2``."""
        threads = self.knobs.threads
        text = f"{self.instances} x {threads} thread{'s' if threads != 1 else ''}"
        if self.knobs.hint is not None:
            text += f" {self.knobs.hint}/{self.knobs.streams or 1}"
        return text


def instance_counts(cores: int) -> list[int]:
    """The instance counts worth measuring on ``cores``: 1, 2, 4, ... up to the cores (at most 8),
    each instance taking an equal share of them."""
    counts, n = [], 1
    while n <= min(cores, 8):
        counts.append(n)
        n *= 2
    return counts


@dataclass(frozen=True)
class ContainerBackend:
    """How the official tritonserver container serves a runtime (the ``cpu`` target): its
    ``platform`` or ``backend``, the precisions it serves, its parameters, and whether a variant
    is served under the model's own name only where the spec pins this runtime."""

    platform: str = ""
    backend: str = ""
    precisions: frozenset[str] = frozenset()
    parameters: dict[str, str] = field(default_factory=dict)
    pinned_only: bool = False


class CpuRuntime(ABC):
    """One CPU runtime (see the module's docstring)."""

    name: ClassVar[str]  # the config's ``runtime`` parameter and variant names' suffix
    distribution: ClassVar[str]  # the package that provides it
    precisions: ClassVar[Mapping[str, Runs]]  # the precisions it runs
    # Resident bytes of one Python-backend stub serving a tiny graph on this runtime (interpreter,
    # numpy, the library and its thread pool): what the memory plan counts per instance before the
    # model's weights and activations. Measured with ``tritonforge estimate --measure``.
    stub_memory: ClassVar[int]

    def version(self) -> str:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return "absent"

    def runs(self, precision: str) -> bool:
        return precision in self.precisions

    def missing_flags(self, precision: str, cpu_flags: frozenset[str]) -> frozenset[str]:
        """The flags ``precision`` needs and this CPU lacks (empty: it runs here)."""
        needed = self.precisions[precision].needs
        return frozenset() if not needed or needed & cpu_flags else needed

    def parameters(self, knobs: Knobs, *, served: bool = True) -> dict[str, str]:
        """The served model's parameters for ``knobs`` (the target adds the precision); with
        ``served`` False, those of a session the build opens to verify and time the variant: the
        same, less what only a served model keeps (a compile cache in its folder)."""
        return {INTRA_OP_THREADS: str(knobs.threads)}

    @abstractmethod
    def open(
        self, model: Path | bytes, precision: str, params: Mapping[str, str], *, instances: int = 1,
        quiet: bool = False,
    ) -> Session:  # fmt: skip
        """``model`` (a file, or a serialized graph) opened at ``precision`` with the served
        model's ``params``, as one of ``instances`` sessions sharing the machine; ``quiet`` logs
        nothing below fatal. Raises RuntimeRefused where this host cannot."""

    def container(self, knobs: Knobs, max_batch_size: int) -> ContainerBackend | None:
        """The container backend that serves this runtime, or None where none does."""
        return None

    def sizings(self, cores: int, base: Knobs, instances: int | None = None) -> list[Sizing]:
        """The sizings worth measuring on ``cores`` for this runtime: every instance count (or the
        pinned ``instances``) with the cores shared out among them (or ``base.threads`` where the
        spec pins it), ``base``'s other knobs kept."""
        counts = [instances] if instances is not None else instance_counts(cores)
        return [Sizing(n, replace(base, threads=base.threads or max(1, cores // n))) for n in counts]


def threads(params: Mapping[str, str], instances: int) -> int:
    """One session's threads: the parameter's number, else the cores shared out among the
    instances (each its own process), so that instances x threads never oversubscribes."""
    given = int(params.get(INTRA_OP_THREADS, "0") or 0)
    if given > 0:
        return given
    return max(1, (os.cpu_count() or 1) // max(instances, 1))


def instances(config: Mapping[str, Any]) -> int:
    """The instances a served model's config asks for (Triton's instance groups together)."""
    return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
