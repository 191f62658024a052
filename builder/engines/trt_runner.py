"""Run a plan on the evaluation inputs (in the worker, on the GPU) with Polygraphy's runner."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.engines.profiles import ProfileShapes, opt_batches, profile_for


def verification_batches(batch_size: int, profiles: list[ProfileShapes]) -> list[int]:
    """The batch sizes the evaluation set runs at: each profile's opt batch and the max batch,
    so that Triton's rule picks every profile (0: an unbatched model, one sample at a time)."""
    if not batch_size:
        return [0]
    return sorted({*(b for b in opt_batches(profiles) if 0 < b <= batch_size), batch_size})


def run_all(
    plan: bytes, inputs: Mapping[str, NDArray[Any]], batch_size: int, profiles: list[ProfileShapes]
) -> dict[str, NDArray[Any]]:
    """Outputs at every verification batch size, keyed ``"<batch>:<output>"``."""
    return {
        f"{b}:{name}": value
        for b in verification_batches(batch_size, profiles)
        for name, value in run_plan(plan, inputs, b, profiles).items()
    }


def run_plan(
    plan: bytes,
    inputs: Mapping[str, NDArray[Any]],
    batch_size: int,
    profiles: list[ProfileShapes] | None = None,
) -> dict[str, NDArray[Any]]:
    """Outputs for every sample, fed ``batch_size`` at a time (0: one unbatched sample at a time),
    each batch under the profile Triton would choose for its shapes (not only profile 0)."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    feeds = list(batches(inputs, batch_size))
    chosen = [profile_for({k: v.shape for k, v in f.items()}, profiles or []) for f in feeds]
    engine = EngineFromBytes(plan)()
    results: dict[int, dict[str, NDArray[Any]]] = {}
    for profile in sorted(set(chosen)):
        with TrtRunner(engine, optimization_profile=profile) as runner:
            for i in (i for i, p in enumerate(chosen) if p == profile):
                # copy: the runner reuses its buffers
                results[i] = {
                    name: np.array(value) for name, value in runner.infer(feed_dict=feeds[i]).items()
                }
    chunks: dict[str, list[NDArray[Any]]] = {}
    for i in range(len(feeds)):
        for name, array in results[i].items():
            chunks.setdefault(name, []).append(array if batch_size else array[None])
    return {name: np.concatenate(parts) for name, parts in chunks.items()}


def profiles_run(
    inputs: Mapping[str, NDArray[Any]], batch_size: int, profiles: list[ProfileShapes]
) -> list[int]:
    """The profiles :func:`run_all` exercises on these inputs."""
    return sorted(
        {
            profile_for({k: v.shape for k, v in f.items()}, profiles)
            for b in verification_batches(batch_size, profiles)
            for f in batches(inputs, b)
        }
    )


def batches(inputs: Mapping[str, NDArray[Any]], batch_size: int) -> Iterator[dict[str, NDArray[Any]]]:
    count = len(next(iter(inputs.values())))
    step = batch_size or 1
    for start in range(0, count, step):
        if batch_size:
            yield {k: np.ascontiguousarray(v[start : start + step]) for k, v in inputs.items()}
        else:
            yield {k: np.ascontiguousarray(v[start]) for k, v in inputs.items()}


def time_plan(
    plan: bytes,
    inputs: Mapping[str, NDArray[Any]],
    batch_size: int,
    profiles: list[ProfileShapes] | None = None,
    repeats: int = 20,
) -> float:
    """Milliseconds per sample: the median of ``repeats`` runs of the first batch, after warm-up."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    feed = next(batches(inputs, batch_size))
    profile = profile_for({k: v.shape for k, v in feed.items()}, profiles or [])
    samples = len(next(iter(feed.values()))) if batch_size else 1
    times = []
    with TrtRunner(EngineFromBytes(plan)(), optimization_profile=profile) as runner:
        for i in range(repeats + 3):
            start = time.perf_counter()
            runner.infer(feed_dict=feed)
            if i >= 3:
                times.append(time.perf_counter() - start)
    return 1000.0 * sorted(times)[len(times) // 2] / samples
