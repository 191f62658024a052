"""The runtimes the ``onnx_runner`` model runs a graph on, one module each. Each opens a ``Session``:
the graph's inputs with the numpy types they take, and ``run`` of a feed for the named outputs.
The builder verifies and times every variant through these same modules, so what was verified is
what is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from numpy.typing import NDArray

from ..contract import RUNTIME


class Session(Protocol):
    inputs: list[tuple[str, Any]]  # each input's name and numpy type (None: whatever it is given)

    def run(self, names: list[str], feed: dict[str, NDArray[Any]]) -> list[NDArray[Any]]: ...


def open_session(path: Path, params: dict[str, str], config: dict[str, Any]) -> Session:
    """The session of the runtime the config's ``runtime`` parameter names (ONNX Runtime if unset)."""
    if params.get(RUNTIME, "onnxruntime") == "openvino":
        from .openvino import served_session

        return served_session(path, params, config)
    from .onnxruntime import served_session as ort_session

    return ort_session(path, params, config)
