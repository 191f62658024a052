"""Run a plan on the evaluation inputs (in the worker, on the GPU) with Polygraphy's runner."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray


def run_plan(plan: bytes, inputs: Mapping[str, NDArray[Any]], batch_size: int) -> dict[str, NDArray[Any]]:
    """Outputs for every sample, fed ``batch_size`` at a time (0: one unbatched sample at a time)."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    chunks: dict[str, list[NDArray[Any]]] = {}
    with TrtRunner(EngineFromBytes(plan)) as runner:
        for feed in batches(inputs, batch_size):
            outputs = runner.infer(feed_dict=feed)
            for name, value in outputs.items():
                array = np.array(value)  # copy: the runner reuses its buffers
                chunks.setdefault(name, []).append(array if batch_size else array[None])
    return {name: np.concatenate(parts) for name, parts in chunks.items()}


def batches(inputs: Mapping[str, NDArray[Any]], batch_size: int) -> Iterator[dict[str, NDArray[Any]]]:
    count = len(next(iter(inputs.values())))
    step = batch_size or 1
    for start in range(0, count, step):
        if batch_size:
            yield {k: np.ascontiguousarray(v[start : start + step]) for k, v in inputs.items()}
        else:
            yield {k: np.ascontiguousarray(v[start]) for k, v in inputs.items()}
