"""ONNX Runtime CPU sessions for the stages, logging nothing of their own.

A stage that fails raises, and the build reports that in one line; what ONNX Runtime would print
beside it (warnings, ``[E:onnxruntime...]`` lines, even on graphs that then run) would reach the
console of a build that passes.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

QUIET = 4  # ORT's log severity: fatal only


def quiet_session(model: Path | bytes, threads: int = 0) -> ort.InferenceSession:
    """A CPU session of ``model`` (a file, or a serialized graph) that logs nothing below fatal."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = QUIET
    source = str(model) if isinstance(model, Path) else model
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
