"""The size stages (``size-<variant>``): how a variant is best served on the building host.

Each sizing its runtime proposes (``CpuRuntime.sizings``: instance counts with the cores shared out
among them, OpenVINO's throughput hint too) is opened exactly as the served model opens it (its
runtime's ``open``, with the parameters its target writes) and measured in process at the two
loads that matter to a served model:

* concurrency 1: one instance answering a lone one-row request, back to back (milliseconds);
* concurrency 8: every instance, each a thread of its own answering one call at a time, each call
  holding the rows eight requests share out among the instances (what Triton's dynamic batcher
  forms at best), or one row where the variant's rows run alone (rows per second).

The variant is served at the sizing whose latency and throughput together come closest to the best
of each (``builder.records.best_of``), among those the spec's pins allow (``instances.count``,
``serve.threads``). The race for the served variant compares its finalists at their chosen sizing.
A stage key holds the graph, the runtime's version, the sizings and the host (cores, CPU flags): a
rebuild on the same host measures nothing.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.cache import file_hash
from builder.errors import ModelRefused
from builder.host import kernel_flags
from builder.progress import progress
from builder.python_models.shared.runtimes import PRECISION, RuntimeRefused, Session, Sizing
from builder.records import SizedPoint, SizingReport
from builder.spec import ModelSpec, Variant
from builder.stages.base import Info, ModelJob, Samples, Stage, StageInputs
from builder.stages.reference import REFERENCE, load_reference

CONCURRENCY = 8  # the load of the second measurement: requests in flight at once
C1_SECONDS = 0.3  # measuring time per sizing at concurrency 1 ...
C8_SECONDS = 0.5  # ... and at concurrency 8
MIN_CALLS = 5  # each measurement takes at least this many calls (a slow model's time grows with it)


class SizeInputs(StageInputs):
    STAGE = "size"
    TOOLS = ("numpy",)
    CODE = ("builder.stages.size",)
    variant_sha256: str
    reference_key: str  # its evaluation inputs feed the calls
    runtime: str
    runtime_version: str
    precision: str
    max_batch_size: int
    alone: bool  # its rows run alone (their answer would move with their mates)
    sizings: list[dict[str, Any]]
    allowed: list[bool]
    cores: int
    cpu: list[str]


class Size(Stage):
    """One variant's sizings measured; ``allowed``: which of them the spec's pins allow."""

    def __init__(
        self, variant: Variant, graph: Path, sizings: list[Sizing], allowed: list[bool], *, alone: bool
    ) -> None:
        self.variant, self.graph, self.sizings, self.allowed, self.alone = (
            variant,
            graph,
            sizings,
            allowed,
            alone,
        )
        self.name = f"size-{variant.name}"

    def inputs(self, job: ModelJob) -> SizeInputs:
        v = self.variant
        return SizeInputs(
            variant_sha256=file_hash(self.graph), reference_key=job.result(REFERENCE.name).key,
            runtime=v.runtime, runtime_version=v.cpu_runtime.version(), precision=v.precision.value,
            max_batch_size=job.model.max_batch_size, alone=self.alone,
            sizings=[{"instances": s.instances, **asdict(s.knobs)} for s in self.sizings],
            allowed=self.allowed, cores=os.cpu_count() or 1, cpu=kernel_flags(),
        )  # fmt: skip

    def run(self, job: ModelJob, out: Path) -> Info:
        inputs, _ = load_reference(job.result(REFERENCE.name).out)
        points = []
        label = f"size {job.model.name} {self.variant.name}"
        with progress(len(self.sizings), label, unit="sizing") as bar:
            for sizing, allowed in zip(self.sizings, self.allowed, strict=True):
                points.append(self._measured(job.model, sizing, inputs, allowed))
                bar.advance()
        return dict(SizingReport(self.variant, points).to_json())

    @staticmethod
    def report(variant: Variant, info: Info) -> SizingReport:
        return SizingReport.from_json(variant, dict(info))

    def _measured(self, model: ModelSpec, sizing: Sizing, inputs: Samples, allowed: bool) -> SizedPoint:
        sessions = self._opened(sizing)
        batch = (
            1 if self.alone else max(1, min(model.max_batch_size, math.ceil(CONCURRENCY / sizing.instances)))
        )
        c1 = latency_ms(sessions[0], feed(model, inputs, 1))
        rows = rows_per_s(sessions, feed(model, inputs, batch), batch if model.batched else 1)
        return SizedPoint(sizing, c1, rows, allowed)

    def _opened(self, sizing: Sizing) -> list[Session]:
        on, precision = self.variant.cpu_runtime, self.variant.precision.value
        params = on.parameters(sizing.knobs, served=False) | {PRECISION: precision}
        try:
            return [
                on.open(self.graph, precision, params, instances=sizing.instances, quiet=True)
                for _ in range(sizing.instances)
            ]
        except RuntimeRefused as exc:
            raise ModelRefused(str(exc)) from exc


def feed(model: ModelSpec, inputs: Samples, rows: int) -> dict[str, NDArray[Any]]:
    """``rows`` evaluation samples (repeated where there are fewer) as one call's inputs; a model
    without a batch axis takes one sample as it is."""
    if not model.batched:
        return {k: np.asarray(v[0]) for k, v in inputs.items()}
    reps = -(-rows // next(iter(inputs.values())).shape[0])
    return {k: np.concatenate([v] * reps)[:rows] for k, v in inputs.items()}


def latency_ms(session: Session, call: dict[str, NDArray[Any]]) -> float:
    """The median time of one call, back to back, after a warm-up."""
    session.run(None, call)
    times: list[float] = []
    deadline = time.perf_counter() + C1_SECONDS
    while time.perf_counter() < deadline or len(times) < MIN_CALLS:
        start = time.perf_counter()
        session.run(None, call)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


def rows_per_s(
    sessions: Sequence[Session],
    call: dict[str, NDArray[Any]],
    rows: int,
    seconds: float = C8_SECONDS,
    min_calls: int = MIN_CALLS,
) -> float:
    """Rows per second with each session called back to back (``rows`` a call) by a thread of its
    own, for ``seconds`` and at least ``min_calls`` calls each (the bench measures the same way)."""
    for s in sessions:
        s.run(None, call)  # warm-up: allocation, a shape-specific compile
    counts = [0] * len(sessions)
    start = time.perf_counter()
    deadline = start + seconds

    def loop(i: int) -> None:
        while time.perf_counter() < deadline or counts[i] < min_calls:
            sessions[i].run(None, call)
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) * rows / (time.perf_counter() - start)
