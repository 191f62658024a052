"""The build worker: ``python -m builder.engines.worker REQUEST.json``.

Runs in its own process so that a TensorRT crash fails one plan, not the build.
Builds the plan, then runs it on the evaluation inputs for the parent to verify.
A failure TensorRT or Polygraphy names ends with one ``ERROR_PREFIX`` line on stderr and exit
status 3; any other exception is a defect, left uncaught (its traceback in the log, status 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from builder.engines.isolate import ERROR_PREFIX, EXIT_FAILED

if TYPE_CHECKING:
    from builder.engines.request import BuildRequest


def main(argv: list[str]) -> int:
    keep_torch_out()
    # TensorRT and Polygraphy load in this child process only, so that their crash stays here.
    from builder.engines.request import BuildRequest
    from builder.engines.trt_loader import EngineBuildError, build_plan

    req = BuildRequest.from_json(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        plan = build_plan(req)
    except EngineBuildError as exc:
        return _fail(str(exc))
    _write(Path(req.plan), plan)
    print(f"built {req.plan} ({len(plan)} bytes)", flush=True)
    if req.eval_inputs and req.eval_outputs:
        from builder.engines.trt_runner import run_all

        inputs = dict(np.load(req.eval_inputs, allow_pickle=False))
        try:
            outputs = run_all(plan, inputs, req.batch_size, req.profiles)
        except _refusals() as exc:  # a plan that does not run is a failed plan, with the reason
            return _fail(f"the plan was built but running it failed: {type(exc).__name__}: {exc}")
        np.savez(req.eval_outputs, **outputs)
        if req.eval_timing:
            Path(req.eval_timing).write_text(json.dumps(_timing(plan, inputs, req)), encoding="utf-8")
    return 0


def keep_torch_out() -> None:
    """Polygraphy's TrtRunner asks of every input whether it is a torch tensor, and imports torch to
    know where it is installed (1.6 s of each plan's process here, and its memory); every input
    this process feeds is a NumPy array, so ``import torch`` fails at once here instead."""
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]


def _timing(plan: bytes, inputs: dict[str, NDArray[Any]], req: BuildRequest) -> dict[str, object]:
    """Milliseconds per sample at each profile's opt shape and their mean; a plan that cannot be
    timed is still served when verified, just not chosen for speed."""
    from builder.engines.trt_runner import time_profiles

    try:
        by_profile = time_profiles(plan, inputs, req.batch_size, req.profiles)
    except _refusals() as exc:
        return {"ms_per_sample": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"ms_per_sample": sum(by_profile) / len(by_profile), "by_profile": by_profile}


def _refusals() -> tuple[type[Exception], ...]:
    """What running or timing a plan raises where TensorRT refuses it: its bindings' RuntimeError
    (and trt_runner's own), Polygraphy's exception for a plan that does not deserialize."""
    from polygraphy.exception import PolygraphyException

    return (RuntimeError, PolygraphyException)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _fail(message: str) -> int:
    print(ERROR_PREFIX + " ".join(message.split()), file=sys.stderr, flush=True)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
