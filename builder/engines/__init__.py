"""TensorRT plans for the gpu target: detect, build in a subprocess, verify, record.

Nothing here imports TensorRT at import time; only the build worker does. Names
are re-exported lazily so that ``builder.spec`` can import ``builder.engines.options``
without importing the rest (which imports the spec).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GPU": "detect",
    "TensorRTAvailability": "detect",
    "detect": "detect",
    "Fingerprint": "metadata",
    "is_stale": "metadata",
    "stale_reason": "metadata",
    "EngineOptions": "options",
    "cc_model_filenames": "options",
    "plan_filename": "options",
    "EngineResult": "plan",
    "Evaluation": "plan",
    "Status": "plan",
    "plan_engines": "plan",
    "EngineSet": "build",
    "build_all": "build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'builder.engines' has no attribute '{name}'")
    return getattr(importlib.import_module(f"builder.engines.{_EXPORTS[name]}"), name)
