"""Runs the TensorRT double's plans: TEST DOUBLE of Polygraphy's TensorRT runner.

A double plan names the ONNX it was built from; running it runs that ONNX with ONNX
Runtime on the CPU, after the checks TensorRT makes: the plan deserializes only
under the TensorRT version that built it, and every input shape must lie within
the optimization profile the execution context uses (profile 0 unless told, as
Polygraphy's ``TrtRunner``), and that profile must be the one Triton would choose for
those shapes (:func:`triton_profile`, the project's port of Triton's rule), so verification
covers what Triton serves.
``install()`` (called by ``sitecustomize`` here, so in every build subprocess) puts
these classes in place of ``EngineFromBytes`` and ``TrtRunner`` in
``polygraphy.backend.trt``, and of ``DeviceArray`` and ``Stream`` (host memory) and the
CUDA runtime's event calls (``wrapper().handle``) in ``polygraphy.cuda``, when those
modules are imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from collections import OrderedDict
from types import ModuleType
from typing import Any

import numpy as np


class EngineFromBytes:
    def __init__(self, serialized_engine: bytes) -> None:
        self.serialized_engine = bytes(serialized_engine)

    def __call__(self) -> Any:
        import tensorrt as trt

        engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(self.serialized_engine)
        if engine is None:
            raise RuntimeError("Failed to deserialize engine (TensorRT's log above says why)")
        return engine


class TrtRunner:
    def __init__(self, engine: Any, name: str | None = None, optimization_profile: int | None = None) -> None:
        self._engine = engine
        self.profile = optimization_profile or 0

    def __enter__(self) -> TrtRunner:
        import onnxruntime as ort
        import tensorrt as trt

        engine = self._engine() if callable(self._engine) else self._engine
        self.plan = engine.plan
        if self.plan["profiles"] and not 0 <= self.profile < len(self.plan["profiles"]):
            raise RuntimeError(f"the engine has no optimization profile {self.profile}")
        self.session = ort.InferenceSession(self.plan["onnx"], providers=["CPUExecutionProvider"])
        trt._record("TrtRunner", self.profile)
        return self

    def __exit__(self, *exc: object) -> None:
        del self.session

    def infer(self, feed_dict: dict[str, np.ndarray], check_inputs: bool = True) -> OrderedDict[str, Any]:
        import tensorrt as trt

        for name, value in feed_dict.items():
            self._check_shape(name, list(value.shape))
        self._check_triton_would_choose({name: list(v.shape) for name, v in feed_dict.items()})
        trt._record("infer", self.profile, {name: list(v.shape) for name, v in feed_dict.items()})
        names = [o.name for o in self.session.get_outputs()]
        return OrderedDict(zip(names, self.session.run(names, dict(feed_dict)), strict=False))

    def _check_triton_would_choose(self, shapes: dict[str, list[int]]) -> None:
        """Verification must run each shape under the profile Triton serves it with."""
        chosen = triton_profile(self.plan["profiles"], shapes)
        if chosen is not None and chosen != self.profile:
            raise RuntimeError(
                f"shapes {shapes} ran under profile {self.profile}; Triton serves them with profile "
                f"{chosen} (GetMostOptimizedProfile)"
            )

    def _check_shape(self, name: str, shape: list[int]) -> None:
        declared = self.plan["inputs"].get(name)
        if declared is None:
            raise RuntimeError(f"the engine has no input '{name}'")
        if len(shape) != len(declared) or any(
            d not in (-1, s) for d, s in zip(declared, shape, strict=False)
        ):
            raise RuntimeError(f"input '{name}': shape {shape} does not match the engine's {declared}")
        profiles = self.plan["profiles"]
        if not profiles or name not in profiles[self.profile]:
            return
        low, _, high = profiles[self.profile][name]
        if not all(lo <= s <= hi for lo, s, hi in zip(low, shape, high, strict=False)):
            raise RuntimeError(
                f"IExecutionContext::setInputShape: input '{name}' shape {shape} is outside optimization "
                f"profile {self.profile} (min {low}, max {high})"
            )


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


class DeviceArray:
    """Polygraphy's device buffer, in host memory: only its address and size matter here."""

    def __init__(self, shape: Any = None, dtype: Any = None) -> None:
        self.data = np.zeros(shape or (0,), dtype or np.uint8)
        self.ptr = self.data.ctypes.data

    @staticmethod
    def raw(shape: Any = None) -> DeviceArray:
        return DeviceArray(shape, np.uint8)

    def copy_from(self, host_buffer: np.ndarray, stream: Any = None) -> DeviceArray:
        self.data = np.array(host_buffer)
        self.ptr = self.data.ctypes.data
        return self

    def free(self) -> None:
        self.ptr = 0


class Stream:
    def __init__(self) -> None:
        self.ptr = id(self)

    def synchronize(self) -> None:
        pass

    def free(self) -> None:
        self.ptr = 0


class _Cudart:
    """The CUDA event calls of libcudart (ctypes style: results through byref), timed on the
    host clock; every record is journaled."""

    def __init__(self) -> None:
        self.created = 0
        self.recorded: dict[int, float] = {}

    def cudaEventCreate(self, event: Any) -> int:
        self.created += 1
        event._obj.value = self.created
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


class _Wrapper:
    handle = _Cudart()


def wrapper() -> _Wrapper:
    return _Wrapper()


PATCHES = {
    "polygraphy.backend.trt": {"EngineFromBytes": EngineFromBytes, "TrtRunner": TrtRunner},
    "polygraphy.cuda": {"DeviceArray": DeviceArray, "Stream": Stream, "wrapper": wrapper},
}


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
            for attribute, value in PATCHES[name].items():
                setattr(module, attribute, value)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if not any(isinstance(f, _Patch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Patch())
