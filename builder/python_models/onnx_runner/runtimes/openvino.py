"""OpenVINO on the CPU: the ONNX graph read as it is, compiled for one stream of
``INFERENCE_NUM_THREADS`` at the variant's precision (bf16 where the CPU has AVX-512 BF16 or AMX;
f32 otherwise, forced: OpenVINO's default is bf16 on such CPUs). The precision the compiled model
really uses is read back, never assumed."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from ..contract import OPENVINO_CACHE, PRECISION
from ..utils.sizing import threads

# The inference precision each variant asks for: bf16 for bf16; f32 for fp32 and for the float
# parts of a Q/DQ INT8 graph (its INT8 parts run in INT8 whatever the hint).
HINTS = {"bf16": "bf16", "fp32": "f32", "int8": "f32"}


class OpenVinoSession:
    """A compiled model and one infer request per calling thread (a request is not shared)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.inputs = [(p.get_any_name(), p.get_element_type().to_dtype()) for p in compiled.inputs]
        self.output_names = [p.get_any_name() for p in compiled.outputs]
        self.index = {name: i for i, p in enumerate(compiled.outputs) for name in p.get_names()}
        self.computed_in = str(compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
        self.local = threading.local()

    def run(self, names: list[str] | None, feed: dict[str, NDArray[Any]]) -> list[NDArray[Any]]:
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        results = request.infer(feed).to_tuple()  # copies: the request's buffers are reused
        return [results[self.index[n]] for n in names or self.output_names]


def compile_graph(
    path: Path, precision: str, threads: int, cache_dir: Path | None = None, *, pinned: bool = True
) -> OpenVinoSession:
    """``path`` compiled at ``precision``'s hint; ImportError where OpenVINO cannot be had.
    ``pinned: False`` leaves the threads to the kernel's scheduler (see ``served_session``)."""
    import openvino as ov

    core = ov.Core()
    if cache_dir is not None:
        core.set_property({"CACHE_DIR": str(cache_dir)})
    config = {"INFERENCE_PRECISION_HINT": HINTS[precision], "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
    if threads > 0:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    if not pinned:
        config["ENABLE_CPU_PINNING"] = "NO"
    return OpenVinoSession(core.compile_model(str(path), "CPU", config))


def served_session(path: Path, params: dict[str, str], config: dict[str, Any]) -> OpenVinoSession:
    """The served model's session; compiled blobs cached in the version folder where it is
    writable, so a restart does not compile again. Unpinned: each instance is a process of its
    own, and OpenVINO pins a process's threads from core 0 up without knowing of the others, so
    two one-thread instances both ran on core 0 (bench/results/cpu_runtimes_pinning.json)."""
    cache = _cache(path, params)
    return compile_graph(path, params.get(PRECISION, "fp32"), threads(params, config), cache, pinned=False)


def _cache(path: Path, params: dict[str, str]) -> Path | None:
    name = params.get(OPENVINO_CACHE, "")
    if not name:
        return None
    folder = path.parent / name
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None  # a read-only repository: compile at every start
    return folder if os.access(folder, os.W_OK) else None
