"""Runs the TensorRT double's plans through Polygraphy's own runner: TEST DOUBLE of the CUDA runtime.

A double plan names the ONNX it was built from; its execution context (``tensorrt``
beside this module) runs that ONNX with ONNX Runtime on the CPU, after the checks
TensorRT makes: the plan deserializes only under the TensorRT version that built it,
and every input shape must lie within the optimization profile the context uses.
Polygraphy's real ``EngineFromBytes``, ``TrtRunner``, ``DeviceArray`` and ``Stream`` run
against it: ``install()`` (called by ``sitecustomize`` here, so in every build subprocess)
gives ``polygraphy.cuda`` a CUDA runtime on host memory in place of libcudart
(:class:`HostCudart`: malloc, copies, streams and the event calls the timing uses), and
wraps Polygraphy's ``TrtRunner`` so that each ``infer`` first checks that its profile is
the one Triton would choose for those shapes (:func:`triton_profile`, the project's port of
Triton's rule), so verification covers what Triton serves.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import os
import sys
import time
from types import ModuleType
from typing import Any


def _runner_class() -> type:
    from polygraphy.backend.trt.runner import TrtRunner as PolygraphyTrtRunner

    class TrtRunner(PolygraphyTrtRunner):  # type: ignore[misc, valid-type]
        """Polygraphy's runner, journaled, refusing a profile Triton would not choose."""

        def __enter__(self) -> Any:
            import tensorrt as trt

            super().__enter__()
            trt._record("TrtRunner", self.optimization_profile or 0)
            return self

        def infer(self, feed_dict: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            import tensorrt as trt

            shapes = {name: list(v.shape) for name, v in feed_dict.items()}
            profile = self.optimization_profile or 0
            chosen = triton_profile(self.engine.plan["profiles"], shapes)
            if chosen is not None and chosen != profile:
                raise RuntimeError(
                    f"shapes {shapes} ran under profile {profile}; Triton serves them with profile "
                    f"{chosen} (GetMostOptimizedProfile)"
                )
            trt._record("infer", profile, shapes)
            return super().infer(feed_dict, *args, **kwargs)

    return TrtRunner


def triton_profile(profiles: list[dict[str, Any]], shapes: dict[str, list[int]]) -> int | None:
    """The profile Triton's TensorRT backend runs these shapes with: the project's one port of
    its ``GetMostOptimizedProfile`` (builder.engines.profiles). Triton's config is not in the
    plan: ``TRT_DOUBLE_BATCHING=0`` says it has ``max_batch_size: 0`` (default: it batches)."""
    from builder.engines.profiles import InputRange, most_optimized_profile

    ranges = [
        [InputRange(name, tuple(low), tuple(opt), tuple(high)) for name, (low, opt, high) in p.items()]
        for p in profiles
    ]
    batching = os.environ.get("TRT_DOUBLE_BATCHING", "1") != "0"
    return most_optimized_profile(shapes, ranges, batching=batching)


def triton_model_file(cc_model_filenames: dict[str, str], default: str, cc: str) -> str:
    """The file Triton's TensorRT backend loads on a GPU of compute capability ``cc``: its
    entry in ``cc_model_filenames``, else ``default_model_filename``."""
    return cc_model_filenames.get(cc, default)


class HostCudart:
    """libcudart's calls that Polygraphy and the timing make, on host memory (ctypes style:
    results through ``byref``). Events are timed on the host clock and journaled."""

    def __init__(self) -> None:
        self.memory: dict[int, Any] = {}
        self.streams = 0
        self.events = 0
        self.recorded: dict[int, float] = {}

    def cudaMalloc(self, ptr: Any, nbytes: Any) -> int:
        block = ctypes.create_string_buffer(max(1, int(getattr(nbytes, "value", nbytes))))
        address = ctypes.addressof(block)
        self.memory[address] = block
        ptr._obj.value = address
        return 0

    def cudaFree(self, ptr: Any) -> int:
        self.memory.pop(ptr.value or 0, None)
        return 0

    def cudaMemcpy(self, dst: Any, src: Any, nbytes: Any, kind: Any) -> int:
        ctypes.memmove(dst.value, src.value, int(getattr(nbytes, "value", nbytes)))
        return 0

    def cudaMemcpyAsync(self, dst: Any, src: Any, nbytes: Any, kind: Any, stream: Any) -> int:
        return self.cudaMemcpy(dst, src, nbytes, kind)

    def cudaStreamCreate(self, ptr: Any) -> int:
        self.streams += 1
        ptr._obj.value = 0x5000 + self.streams
        return 0

    def cudaStreamSynchronize(self, stream: Any) -> int:
        return 0

    def cudaStreamDestroy(self, stream: Any) -> int:
        return 0

    def cudaEventCreate(self, event: Any) -> int:
        self.events += 1
        event._obj.value = self.events
        return 0

    def cudaEventRecord(self, event: Any, stream: Any) -> int:
        import tensorrt as trt

        self.recorded[event.value] = time.perf_counter()
        trt._record("cudaEventRecord", event.value)
        return 0

    def cudaEventSynchronize(self, event: Any) -> int:
        return 0 if event.value in self.recorded else 600  # cudaErrorNotReady

    def cudaEventElapsedTime(self, ms: Any, start: Any, end: Any) -> int:
        ms._obj.value = 1000.0 * (self.recorded[end.value] - self.recorded[start.value])
        return 0

    def cudaEventDestroy(self, event: Any) -> int:
        self.recorded.pop(event.value, None)
        return 0


def _host_cuda(module: ModuleType) -> None:
    """Polygraphy's global CUDA wrapper, with the host runtime as its libcudart handle."""
    wrapper = object.__new__(module.Cuda)
    wrapper.handle = HostCudart()
    module.G_CUDA = wrapper


def _runner(module: ModuleType) -> None:
    module.TrtRunner = _runner_class()
    package = sys.modules.get("polygraphy.backend.trt")
    if package is not None:  # already imported: its name too (on first import, `import *` copies it)
        package.TrtRunner = module.TrtRunner


PATCHES = {"polygraphy.cuda.cuda": _host_cuda, "polygraphy.backend.trt.runner": _runner}


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch Polygraphy's modules when they are imported, and those already imported."""
    if not any(isinstance(f, _Patch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Patch())
    for name, patch in PATCHES.items():
        if name in sys.modules and not getattr(sys.modules[name], "_trt_double", False):
            patch(sys.modules[name])
            sys.modules[name]._trt_double = True  # type: ignore[attr-defined]
