"""A variant's runtime, opened for the stages: ONNX Runtime through ``builder.stages.sessions``,
OpenVINO through the very module the served ``onnx_runner`` model compiles with, so what is verified
and timed here is what the server runs.

A runtime that cannot be had on this host (not installed, or the CPU lacks the instructions its
precision needs) refuses the variant with one line; the build goes on without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from builder.errors import ModelRefused
from builder.spec import Precision, Runtime, Variant
from builder.stages.sessions import quiet_session

# The precision OpenVINO reports for each variant it compiles (read back from the compiled model).
OPENVINO_COMPUTES = {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.INT8: "f32"}


class VariantSession:
    """One variant's graph opened on its runtime: ``run`` as ONNX Runtime's (None: every output)."""

    def __init__(self, session: Any, output_names: list[str], computed_in: str | None) -> None:
        self.session = session
        self.output_names = output_names
        self.computed_in = computed_in

    def run(self, names: Sequence[str] | None, feed: dict[str, NDArray[Any]]) -> list[NDArray[Any]]:
        return list(self.session.run(list(names) if names is not None else None, feed))


def open_variant(variant: Variant, path: Path, threads: int = 0) -> VariantSession:
    if variant.runtime is Runtime.OPENVINO:
        return _openvino(variant.precision, path, threads)
    session = quiet_session(path, threads)
    return VariantSession(session, [o.name for o in session.get_outputs()], None)


def _openvino(precision: Precision, path: Path, threads: int) -> VariantSession:
    try:
        from builder.python_models.onnx_runner.runtimes.openvino import compile_graph

        compiled = compile_graph(path, precision.value, threads)
    except ImportError as exc:
        raise ModelRefused(f"OpenVINO cannot be imported here ({exc})") from exc
    except RuntimeError as exc:  # OpenVINO's own refusal of the graph
        raise ModelRefused(f"OpenVINO cannot compile the graph: {_first_line(exc)}") from exc
    wanted = OPENVINO_COMPUTES[precision]
    if compiled.computed_in != wanted:
        raise ModelRefused(
            f"OpenVINO computes {compiled.computed_in}, not {wanted}, on this CPU"
            + (" (bf16 needs AVX-512 BF16 or AMX)" if precision is Precision.BF16 else "")
        )
    return VariantSession(compiled, compiled.output_names, compiled.computed_in)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
