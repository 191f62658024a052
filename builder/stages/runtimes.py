"""A variant's graph opened on its runtime for the stages, exactly as the served model opens it:
through the runtime's own ``open`` (builder/python_models/shared/runtimes), with the parameters the
local target writes for the model's serving knobs and its instance count. What is verified and
timed here is what the server runs.

A runtime that cannot run the variant on this host (not installed, the CPU lacks the instructions
its precision needs, a graph it refuses, or a precision it does not really compute in) refuses it
with one line; the build goes on without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.errors import ModelRefused
from builder.host import cpu_flags
from builder.progress import progress
from builder.python_models.shared.runtimes import PRECISION, Knobs, RuntimeRefused, Session, runtime
from builder.python_models.shared.runtimes.onnxruntime import OrtSession
from builder.spec import ONNXRUNTIME, ModelSpec, Precision, Variant


def open_variant(
    variant: Variant, path: Path, model: ModelSpec | None = None, knobs: Knobs | None = None
) -> Session:
    """``variant``'s graph at ``path`` opened as the served model opens it: with the parameters its
    target writes for ``knobs`` (the target's, ``Target.knobs``), as one of the model's instances
    (``model`` None: one instance)."""
    on = variant.cpu_runtime
    precision = variant.precision.value
    missing = on.missing_flags(precision, cpu_flags())
    if missing:
        raise ModelRefused(f"{variant.name} needs one of {', '.join(sorted(missing))} in the CPU flags")
    params = on.parameters(knobs or Knobs(), served=False) | {PRECISION: precision}
    count = model.instances.count if model is not None else 1
    try:
        session = on.open(path, precision, params, instances=count, quiet=True)
    except RuntimeRefused as exc:
        raise ModelRefused(str(exc)) from exc
    wanted = on.precisions[precision].computes
    if session.computed_in != wanted:
        raise ModelRefused(f"{on.name} computes {session.computed_in}, not {wanted}, on this CPU")
    return session


def ort_session(model: Path | bytes) -> Any:
    """ONNX Runtime's own ``InferenceSession`` of a graph, opened by its runtime, logging nothing:
    what the stages that probe, convert or check a graph use."""
    session = runtime(ONNXRUNTIME).open(model, "fp32", {}, quiet=True)
    assert isinstance(session, OrtSession)
    return session.session


def run_onnx(path: Path, inputs: dict[str, NDArray[Any]], *, batch_size: int) -> dict[str, NDArray[Any]]:
    """Run on ONNX Runtime in batches of ``batch_size`` (0: one sample at a time, no batch axis)."""
    return run_session(open_variant(Variant(Precision.FP32), path), inputs, batch_size=batch_size)


def run_session(
    sess: Session, inputs: dict[str, NDArray[Any]], *, batch_size: int, label: str = ""
) -> dict[str, NDArray[Any]]:
    """All samples in batches; with a ``label``, a progress bar on a terminal."""
    names = sess.output_names
    count = next(iter(inputs.values())).shape[0]
    parts: list[list[NDArray[Any]]] = []
    with progress(count if label else 0, label, unit="sample") as bar:
        for start in range(0, count, max(batch_size, 1)):
            if batch_size == 0:
                feed = {k: np.asarray(v[start]) for k, v in inputs.items()}  # rank 0 stays an array
                parts.append([o[np.newaxis] for o in sess.run(names, feed)])
            else:
                feed = {k: v[start : start + batch_size] for k, v in inputs.items()}
                parts.append(sess.run(names, feed))
            bar.advance(min(max(batch_size, 1), count - start))
    return {name: np.concatenate([p[i] for p in parts]) for i, name in enumerate(names)}


def run_model(
    sess: Session, model: ModelSpec, inputs: dict[str, NDArray[Any]], *, label: str = ""
) -> dict[str, NDArray[Any]]:
    """All samples through the model: in batches, or as one sequence of chunks for a stateful model."""
    if model.sequence is not None:
        from builder.stages.sequence import run_sequence

        return run_sequence(sess, model, inputs)
    return run_session(sess, inputs, batch_size=model.max_batch_size, label=label)  # 0: no batch axis
