"""RECORDING TEST DOUBLE of the TensorRT Python API; not TensorRT.

It stands in for ``tensorrt`` in the engine tests (put ``trt_double/`` first on
``sys.path`` or ``PYTHONPATH``). Every call the builder makes is appended to
``JOURNAL`` and, when ``TRT_DOUBLE_JOURNAL`` names a file, to that file as JSON
lines, so tests in the parent process can read what a build subprocess did.

Behaviour switches (environment): ``TRT_DOUBLE_VERSION`` (default 10.13.0.35;
from 11 on the FP16/INT8 builder flags and calibrators are absent, as in
TensorRT 11), ``TRT_DOUBLE_CRASH=1`` (the build dies of SIGSEGV),
``TRT_DOUBLE_PARSE_ERROR=<node>`` (the parser rejects that node),
``TRT_DOUBLE_NO_ENGINE=1`` (the build returns None).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import onnx

__version__ = os.environ.get("TRT_DOUBLE_VERSION", "10.13.0.35")
_MAJOR = int(__version__.split(".")[0])
JOURNAL: list[tuple[Any, ...]] = []


def _record(*event: Any) -> None:
    JOURNAL.append(event)
    path = os.environ.get("TRT_DOUBLE_JOURNAL")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event, default=repr) + "\n")


class _Enum:
    def __init__(self, name: str, value: int) -> None:
        self.name, self.value = name, value

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return self.name


def _enum(cls_name: str, names: list[str]) -> type:
    members = {n: _Enum(n, i) for i, n in enumerate(names)}
    cls = type(cls_name, (), dict(members))
    cls.__members__ = members  # type: ignore[attr-defined]
    return cls


BuilderFlag = _enum("BuilderFlag", ["FP16", "INT8", "DEBUG"] if _MAJOR < 11 else ["DEBUG", "REFIT"])
NetworkDefinitionCreationFlag = _enum("NetworkDefinitionCreationFlag", ["EXPLICIT_BATCH", "STRONGLY_TYPED"])
MemoryPoolType = _enum("MemoryPoolType", ["WORKSPACE"])
HardwareCompatibilityLevel = _enum(
    "HardwareCompatibilityLevel", ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"]
)


class ILogger:
    pass


class Logger(ILogger):
    WARNING = "WARNING"

    def __init__(self, min_severity: Any = None) -> None:
        self.min_severity = min_severity


class Dims(tuple):
    pass


class ITensor:
    def __init__(self, name: str) -> None:
        self.name = name


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: list[ITensor] = []

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, index: int) -> ITensor:
        return self.inputs[index]


class ParserError:
    def __init__(self, node: str) -> None:
        self._node = node

    def node_name(self) -> str:
        return self._node

    def node(self) -> int:
        return 0

    def node_operator(self) -> str:
        return "Conv"

    def desc(self) -> str:
        return "unsupported attribute"


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: ILogger) -> None:
        self.network = network
        self.errors: list[ParserError] = []

    def parse_from_file(self, model: str) -> bool:
        _record("parse_from_file", model)
        bad = os.environ.get("TRT_DOUBLE_PARSE_ERROR")
        if bad:
            self.errors.append(ParserError(bad))
            return False
        graph = onnx.load(model, load_external_data=False).graph
        weights = {i.name for i in graph.initializer}
        self.network.inputs = [ITensor(i.name) for i in graph.input if i.name not in weights]
        return True

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> ParserError:
        return self.errors[index]


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[Any, Any, Any]] = {}

    def set_shape(self, input: str, min: Dims, opt: Dims, max: Dims) -> None:
        assert all(isinstance(d, Dims) for d in (min, opt, max)), "TensorRT wants Dims"
        self.shapes[input] = (list(min), list(opt), list(max))
        _record("set_shape", input, list(min), list(opt), list(max))


class IHostMemory(bytes):
    pass


class ITimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def serialize(self) -> IHostMemory:
        return IHostMemory(self.data + b"+timing")


class IInt8Calibrator:
    def __init__(self) -> None:
        pass


if _MAJOR < 11:

    class IInt8EntropyCalibrator2(IInt8Calibrator):
        pass


class IBuilderConfig:
    def __init__(self) -> None:
        self.profiles: list[IOptimizationProfile] = []
        self._cache: ITimingCache | None = None
        object.__setattr__(self, "builder_optimization_level", 3)  # defaults, not calls

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name != "profiles":
            if name == "int8_calibrator" and _MAJOR >= 11:
                raise AttributeError("int8_calibrator was removed in TensorRT 11")
            _record("config." + name, value if not isinstance(value, IInt8Calibrator) else _calib(value))
        object.__setattr__(self, name, value)

    def set_flag(self, flag: _Enum) -> None:
        _record("set_flag", flag.name)

    def set_memory_pool_limit(self, pool: _Enum, size: int) -> None:
        _record("set_memory_pool_limit", pool.name, size)

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        _record("add_optimization_profile", len(self.profiles) - 1)
        return len(self.profiles) - 1

    def set_calibration_profile(self, profile: IOptimizationProfile) -> bool:
        _record("set_calibration_profile", self.profiles.index(profile))
        return True

    def create_timing_cache(self, data: bytes) -> ITimingCache:
        _record("create_timing_cache", bytes(data).decode(errors="replace"))
        return ITimingCache(data)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        self._cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache:
        assert self._cache is not None
        return self._cache


def _calib(calibrator: Any) -> dict[str, Any]:
    table = calibrator.read_calibration_cache()
    return {
        "class": type(calibrator).__mro__[1].__name__,
        "table": bytes(table).decode(),
        "batch": calibrator.get_batch(["x"]),
    }


class Builder:
    def __init__(self, logger: ILogger) -> None:
        _record("Builder")

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        _record("create_network", flags)
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(
        self, network: INetworkDefinition, config: IBuilderConfig
    ) -> IHostMemory | None:
        _record("build_serialized_network", len(config.profiles))
        if os.environ.get("TRT_DOUBLE_CRASH"):
            os.kill(os.getpid(), signal.SIGSEGV)
        if os.environ.get("TRT_DOUBLE_NO_ENGINE"):
            return None
        return IHostMemory(b"PLAN-DOUBLE " + json.dumps([p.shapes for p in config.profiles]).encode())
