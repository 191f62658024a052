"""RECORDING TEST DOUBLE of the TensorRT Python API; not TensorRT.

It stands in for ``tensorrt`` in the engine tests (put ``trt_double/`` first on
``sys.path`` or ``PYTHONPATH``). The builder reaches it through Polygraphy's real
loaders and runner (NetworkFromOnnxPath, CreateConfig with Profile and Calibrator,
EngineBytesFromNetwork, EngineFromBytes, TrtRunner: Polygraphy 0.53.6), so it has the
members those call, not only the project's own calls. Every call is appended to
``JOURNAL`` and, when ``TRT_DOUBLE_JOURNAL`` names a file, to that file as JSON
lines, so tests in the parent process can read what a build subprocess did.

It refuses what TensorRT refuses, where the builder could get it wrong, and raises what
TensorRT's bindings raise (RuntimeError for a call TensorRT refuses, TypeError for an
argument pybind11 cannot convert): INT32
quantized data behind a DequantizeLinear (the parser), ``set_shape`` values that
break TensorRT's three rules (RuntimeError), a profile invalid in itself
(``add_optimization_profile`` returns -1), a profile that does not fit the network
(``build_serialized_network`` returns None, as TensorRT reports it there), a
network with dynamic inputs and no profile, a calibration cache whose header is not this version's (it then
"calibrates" with the calibrator's batches, and without any the build fails; a cache it
uses it writes back through the calibrator, reordered), a
timing cache from another version or device (``set_timing_cache`` returns
False), and a plan of another version (``Runtime.deserialize_cuda_engine``
returns None).

A plan is JSON naming the ONNX it was built from and its profiles; its execution
context runs that ONNX with ONNX Runtime on the inputs at their (host) addresses, after
checking every input shape against the profile in use, as TensorRT does, and writes
the outputs to their addresses or output allocators. ``trt_double_runner`` beside this
package gives Polygraphy a CUDA runtime on host memory for that.

Behaviour switches (environment): ``TRT_DOUBLE_VERSION`` (default 10.13.0.35;
before 10.9 there is no ``HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY``;
from 11 on the FP16/INT8 builder flags, the IInt8 calibrators and ``int8_calibrator``
are absent, as in TensorRT 11), ``TRT_DOUBLE_DEVICE`` (the GPU a timing cache records, default
``sm86``), ``TRT_DOUBLE_CRASH=1`` (the build dies of SIGSEGV),
``TRT_DOUBLE_PARSE_ERROR=<node>`` (the parser rejects that node),
``TRT_DOUBLE_NO_ENGINE=1`` (the build returns None).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
from typing import Any

import onnx

__version__ = os.environ.get("TRT_DOUBLE_VERSION", "10.13.0.35")
_MAJOR, _MINOR, _PATCH = (int(part) for part in __version__.split(".")[:3])
_DEVICE = os.environ.get("TRT_DOUBLE_DEVICE", "sm86")
PLAN_MAGIC = b"PLAN-DOUBLE "
_TIMING_MAGIC = b"TIMING-DOUBLE"
_QUANTIZED = {"INT8", "FLOAT8E4M3FN", "INT4", "FLOAT4E2M1"}  # what its DequantizeLinear takes
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
    "HardwareCompatibilityLevel",
    ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"]
    if (_MAJOR, _MINOR) >= (10, 9)
    else ["NONE", "AMPERE_PLUS"],
)


class ILogger:
    pass


class Logger(ILogger):
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = "INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"

    def __init__(self, min_severity: Any = None) -> None:
        self.min_severity = min_severity


class Dims(tuple):
    pass


def init_libnvinfer_plugins(logger: Any, namespace: str) -> bool:
    return True


class DataType:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


float32, float16, int8, int32, int64, uint8 = (
    DataType("FLOAT", 4),
    DataType("HALF", 2),
    DataType("INT8", 1),
    DataType("INT32", 4),
    DataType("INT64", 8),
    DataType("UINT8", 1),
)
# The ONNX types at a network's inputs and outputs this double runs (TensorRT 10 takes BOOL too; the
# double refuses it, as it would shadow the builtin here); the parser refuses the others.
_ONNX_TYPES = {
    onnx.TensorProto.FLOAT: float32,
    onnx.TensorProto.FLOAT16: float16,
    onnx.TensorProto.INT8: int8,
    onnx.TensorProto.INT32: int32,
    onnx.TensorProto.INT64: int64,
    onnx.TensorProto.UINT8: uint8,
}


class ITensor:
    def __init__(self, name: str, shape: list[int], dtype: DataType = float32) -> None:
        self.name = name
        self.shape = Dims(shape)  # -1 for a dynamic dimension
        self.dtype = dtype
        self.is_shape_tensor = False


# What Polygraphy asks of layers: their type (Q/DQ decide whether a calibrator is used) and
# whether a precision was set on them.
LayerType = _enum("LayerType", ["CONVOLUTION", "ACTIVATION", "SHAPE", "QUANTIZE", "DEQUANTIZE", "UNARY"])
_LAYER_TYPES = {
    "QuantizeLinear": LayerType.QUANTIZE,  # type: ignore[attr-defined]
    "DequantizeLinear": LayerType.DEQUANTIZE,  # type: ignore[attr-defined]
    "Shape": LayerType.SHAPE,  # type: ignore[attr-defined]
    "Conv": LayerType.CONVOLUTION,  # type: ignore[attr-defined]
    "Relu": LayerType.ACTIVATION,  # type: ignore[attr-defined]
}


class ILayer:
    def __init__(self, node: onnx.NodeProto) -> None:
        self.name = node.name
        self.type = _LAYER_TYPES.get(node.op_type, LayerType.UNARY)  # type: ignore[attr-defined]
        self.precision_is_set = False
        self.precision = float32


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: list[ITensor] = []
        self.onnx = ""
        self.tensors: set[str] = set()  # every tensor name of the parsed graph
        self.layers: list[ILayer] = []

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, index: int) -> ILayer:
        return self.layers[index]

    def __iter__(self) -> Any:
        return iter(self.layers)

    def get_flag(self, flag: _Enum) -> bool:
        return bool(self.flags & (1 << int(flag)))

    def get_input(self, index: int) -> ITensor:
        return self.inputs[index]


class ParserError:
    def __init__(self, node: str, operator: str = "Conv", desc: str = "unsupported attribute") -> None:
        self._node, self._operator, self._desc = node, operator, desc

    def node_name(self) -> str:
        return self._node

    def node(self) -> int:
        return 0

    def node_operator(self) -> str:
        return self._operator

    def desc(self) -> str:
        return self._desc

    def __str__(self) -> str:  # as TensorRT prints it
        return f"In node {self.node()} with name: {self._node} and operator: {self._operator} ({self._desc})"


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
        self.errors += _unsupported_dequantize(graph) + _unsupported_io_types(graph)
        if self.errors:
            return False
        weights = {i.name for i in graph.initializer}
        self.network.inputs = [
            ITensor(i.name, _dims(i), _ONNX_TYPES[i.type.tensor_type.elem_type])
            for i in graph.input
            if i.name not in weights
        ]
        self.network.layers = [ILayer(n) for n in graph.node]
        self.network.onnx = model
        self.network.tensors = {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
        return True

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> ParserError:
        return self.errors[index]


def _dims(value: onnx.ValueInfoProto) -> list[int]:
    dims = value.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else -1 for d in dims]


def _unsupported_io_types(graph: onnx.GraphProto) -> list[ParserError]:
    return [
        ParserError(
            v.name,
            "Input",
            f"unsupported data type {onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type)}",
        )
        for v in [*graph.input, *graph.output]
        if v.type.tensor_type.elem_type not in _ONNX_TYPES
    ]


def _unsupported_dequantize(graph: onnx.GraphProto) -> list[ParserError]:
    types = {i.name: onnx.TensorProto.DataType.Name(i.data_type) for i in graph.initializer}
    return [
        ParserError(
            n.name,
            "DequantizeLinear",
            f"input 0 '{n.input[0]}' is {types[n.input[0]]}; "
            "DequantizeLinear takes INT8, FP8, INT4 or FP4 data",
        )
        for n in graph.node
        if n.op_type == "DequantizeLinear" and types.get(n.input[0], "INT8") not in _QUANTIZED
    ]


class IOptimizationProfile:
    def __init__(self, network: INetworkDefinition | None = None) -> None:
        self.shapes: dict[str, tuple[Any, Any, Any]] = {}
        self.valid = True

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        # Dims, or any sequence of ints (TensorRT's bindings convert them; Polygraphy passes tuples)
        if not all(all(isinstance(d, int) for d in dims) for dims in (min, opt, max)):
            raise TypeError("set_shape(): incompatible function arguments")  # pybind11's refusal
        _record("set_shape", input, list(min), list(opt), list(max))
        refused = _refused_selector(list(min), list(opt), list(max))
        if refused:
            self.valid = False
            # the bindings' own words: setDimensions returned false, pybind11 raises RuntimeError
            raise RuntimeError(f"Shape provided for {refused} is inconsistent with other shapes.")
        self.shapes[input] = (list(min), list(opt), list(max))

    def get_shape(self, input: str) -> list[Dims]:
        return [Dims(d) for d in self.shapes.get(input, ())]  # [] for an input not set

    def __bool__(self) -> bool:
        return self.valid

    def problem(self, network: INetworkDefinition) -> str | None:
        """Why TensorRT would call this profile invalid for ``network`` (None: it is valid)."""
        if not self.valid:
            return "a set_shape call was rejected"
        for tensor in network.inputs:
            shapes = self.shapes.get(tensor.name)
            if shapes is None:
                if -1 in tensor.shape:
                    return f"dynamic input '{tensor.name}' has no shapes"
                continue
            for which in shapes:
                if len(which) != len(tensor.shape) or any(
                    real not in (-1, dim) for real, dim in zip(tensor.shape, which, strict=False)
                ):
                    return f"'{tensor.name}': {which} does not fit its shape {tensor.shape}"
        return None


def _refused_selector(min: list[int], opt: list[int], max: list[int]) -> str | None:
    """Which of TensorRT's setDimensions calls (kMIN, kOPT, kMAX, in that order) refuses: each
    needs dims >= 0 and, against those set before it, the same rank and min <= opt <= max."""
    if any(d < 0 for d in min):
        return "min"
    if len(opt) != len(min) or any(o < 0 or o < m for m, o in zip(min, opt, strict=False)):
        return "opt"
    if len(max) != len(opt) or any(x < o for o, x in zip(opt, max, strict=False)):
        return "max"
    return None


class IHostMemory(bytes):
    def __enter__(self) -> IHostMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class ITimingCache:
    """Serialized: a header naming the TensorRT version and device, then the entries."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        header, _, self.entries = self.data.partition(b"\n")
        self.fits = not self.data or header == _timing_header()

    def serialize(self) -> IHostMemory:
        return IHostMemory(_timing_header() + b"\n" + self.entries + b"+timing")

    def combine(self, other: ITimingCache, ignore_mismatch: bool) -> bool:
        """Adds the other cache's entries this one lacks; another version's only when told to
        ignore the mismatch (and then none of its entries)."""
        _record("combine_timing_cache", other.fits, ignore_mismatch)
        if not other.fits:
            return ignore_mismatch
        if other.entries not in self.entries:
            self.entries = other.entries + self.entries
        return True


def _timing_header() -> bytes:
    return b" ".join([_TIMING_MAGIC, __version__.encode(), _DEVICE.encode()])


if _MAJOR < 11:

    class IInt8Calibrator:
        def __init__(self) -> None:
            pass

    class IInt8EntropyCalibrator2(IInt8Calibrator):
        pass

    class IInt8LegacyCalibrator(IInt8Calibrator):
        pass


DeviceType = _enum("DeviceType", ["GPU", "DLA"])


class IBuilderConfig:
    def __init__(self, network: INetworkDefinition | None = None) -> None:
        self.profiles: list[IOptimizationProfile] = []
        self._cache: ITimingCache | None = None
        self._network = network
        self._flags: set[str] = set()
        self._calibration_profile: IOptimizationProfile | None = None
        object.__setattr__(self, "builder_optimization_level", 3)  # defaults, not calls
        object.__setattr__(self, "DLA_core", -1)
        object.__setattr__(self, "default_device_type", DeviceType.GPU)  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name != "profiles":
            if name == "int8_calibrator" and _MAJOR >= 11:
                raise AttributeError("int8_calibrator was removed in TensorRT 11")
            _record("config." + name, _calib(value) if name == "int8_calibrator" else value)
        object.__setattr__(self, name, value)

    def set_flag(self, flag: _Enum) -> None:
        _record("set_flag", flag.name)
        self._flags.add(flag.name)

    def get_flag(self, flag: _Enum) -> bool:
        return flag.name in self._flags

    @property
    def num_optimization_profiles(self) -> int:
        return len(self.profiles)

    def set_memory_pool_limit(self, pool: _Enum, size: int) -> None:
        _record("set_memory_pool_limit", pool.name, size)

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        # Only a profile invalid in itself is refused here; whether it fits the network is
        # checked by build_serialized_network, as TensorRT does.
        if not profile:
            _record("add_optimization_profile", -1)
            return -1
        self.profiles.append(profile)
        _record("add_optimization_profile", len(self.profiles) - 1)
        return len(self.profiles) - 1

    def set_calibration_profile(self, profile: IOptimizationProfile) -> bool:
        # any valid profile, not only one added to the config (Polygraphy makes a fresh one)
        if not profile:
            return False
        _record("set_calibration_profile", profile.shapes)
        self._calibration_profile = profile
        return True

    def get_calibration_profile(self) -> IOptimizationProfile | None:
        return self._calibration_profile

    def create_timing_cache(self, data: bytes) -> ITimingCache:
        _record("create_timing_cache", bytes(data).decode(errors="replace"))
        return ITimingCache(data)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        _record("set_timing_cache", cache.fits)
        if not cache.fits and not ignore_mismatch:
            return False  # TensorRT: "the timing cache was created on a different device or version"
        self._cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache | None:
        return self._cache  # None (nullptr) when none was set, as TensorRT


def _calib(calibrator: Any) -> dict[str, Any]:
    table = calibrator.read_calibration_cache()
    return {
        "class": type(calibrator).__mro__[1].__name__,
        "table": bytes(table).decode(),
        "batch": calibrator.get_batch(["x"]),
    }


def calibration_header() -> str:
    return f"TRT-{_MAJOR * 10000 + _MINOR * 100 + _PATCH}-EntropyCalibration2"


class Builder:
    def __init__(self, logger: ILogger) -> None:
        _record("Builder")
        self._network: INetworkDefinition | None = None

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        _record("create_network", flags)
        self._network = INetworkDefinition(flags)
        return self._network

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig(self._network)

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
        if any(-1 in t.shape for t in network.inputs) and not config.profiles:
            _record(
                "error", "Network has dynamic or shape inputs, but no optimization profile has been defined."
            )
            return None
        for index, profile in enumerate(config.profiles):
            problem = profile.problem(network)
            if problem:
                _record("error", f"optimization profile {index} is invalid for the network: {problem}")
                return None
        calibrator = getattr(config, "int8_calibrator", None)
        if calibrator is not None and not _calibrate(calibrator, network):
            return None
        plan = {
            "version": __version__,
            "onnx": network.onnx,
            "inputs": {t.name: t.shape for t in network.inputs},
            "profiles": [p.shapes for p in config.profiles],
        }
        return IHostMemory(PLAN_MAGIC + json.dumps(plan).encode())


def _calibrate(calibrator: Any, network: INetworkDefinition) -> bool:
    """TensorRT reads the cache; one it cannot use is skipped and it calibrates with batches."""
    table = bytes(calibrator.read_calibration_cache() or b"").decode()
    header, *lines = table.splitlines()
    if header != calibration_header():
        _record("calibration_cache_rejected", header, calibration_header())
        if not calibrator.get_batch([t.name for t in network.inputs]):
            _record("error", "Calibration failure occurred with no scaling factors detected.")
            return False
        return True
    names = {line.split(":")[0] for line in lines if line.strip()}
    _record("calibration_unknown_tensors", sorted(names - network.tensors))
    # TensorRT may write the cache back through the calibrator, its lines in its own order
    written = "\n".join([header, *reversed(lines)]) + "\n"
    _record("write_calibration_cache", written)
    calibrator.write_calibration_cache(memoryview(written.encode()))
    return True


TensorIOMode = _enum("TensorIOMode", ["NONE", "INPUT", "OUTPUT"])
TensorFormat = _enum("TensorFormat", ["LINEAR", "CHW2", "HWC8", "CHW4", "CHW16", "CHW32", "HWC"])
ExecutionContextAllocationStrategy = _enum("ExecutionContextAllocationStrategy", ["STATIC", "USER_MANAGED"])


class IOutputAllocator:
    """TensorRT calls ``reallocate_output_async`` for an output's memory, then ``notify_shape``."""

    def __init__(self) -> None:
        pass


class ICudaEngine:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.num_optimization_profiles = max(1, len(plan["profiles"]))
        graph = onnx.load(plan["onnx"], load_external_data=False).graph
        self._io = [(name, TensorIOMode.INPUT) for name in plan["inputs"]]
        self._io += [(o.name, TensorIOMode.OUTPUT) for o in graph.output]
        self._types = {
            v.name: _ONNX_TYPES[v.type.tensor_type.elem_type] for v in [*graph.input, *graph.output]
        }
        self._shapes = {v.name: _dims(v) for v in [*graph.input, *graph.output]}
        self._session: Any = None
        self._last: tuple[list[Any], dict[str, Any]] | None = None  # the last run: its feed and outputs

    @property
    def num_io_tensors(self) -> int:
        return len(self._io)

    def get_tensor_name(self, index: int) -> str:
        return self._io[index][0]

    def get_tensor_mode(self, name: str) -> _Enum:
        return dict(self._io).get(name, TensorIOMode.NONE)  # type: ignore[attr-defined]

    def get_tensor_dtype(self, name: str) -> DataType:
        return self._types[name]

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims(self._shapes[name])

    def get_tensor_format(self, name: str, profile_index: int = 0) -> _Enum:
        return TensorFormat.LINEAR  # type: ignore[attr-defined, no-any-return]

    def is_shape_inference_io(self, name: str) -> bool:
        return False

    def get_aliased_input_tensor(self, name: str) -> str | None:
        return None

    def create_execution_context(self, strategy: Any = None) -> IExecutionContext:
        return IExecutionContext(self)

    def outputs(self, feed: dict[str, Any]) -> dict[str, Any]:
        """The plan's ONNX run on ``feed``. The same inputs give the same outputs, so the last
        run's are kept: a timing loop (a hundred launches on one feed) and the output-shape
        queries cost one ONNX Runtime run, not a hundred."""
        import hashlib

        import numpy as np

        key = [(n, v.dtype.str, v.shape, hashlib.sha256(v.tobytes()).hexdigest()) for n, v in feed.items()]
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        session = self.session()
        names = [o.name for o in session.get_outputs()]
        outputs = {n: np.ascontiguousarray(v) for n, v in zip(names, session.run(names, feed), strict=True)}
        self._last = (key, outputs)
        return outputs

    def session(self) -> Any:
        import onnxruntime as ort

        if self._session is None:
            # One thread: a GPU's work done on a CPU beside the test run's other processes, where a
            # second thread spinning between operators only takes their cores.
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            self._session = ort.InferenceSession(
                self.plan["onnx"], options, providers=["CPUExecutionProvider"]
            )
        return self._session


class IExecutionContext:
    """Checks what TensorRT checks before and in ``execute_async_v3``: input shapes set within
    the active profile, memory for every IO tensor (an address, or an output allocator). Running
    it runs the plan's ONNX on the inputs at their addresses and writes the outputs to theirs."""

    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self.profile = 0
        self.shapes: dict[str, list[int]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}

    @property
    def active_optimization_profile(self) -> int:
        return self.profile

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        if not 0 <= profile_index < self.engine.num_optimization_profiles:
            raise RuntimeError("Error in set optimization profile async.")  # never False
        self.profile, self.shapes = profile_index, {}
        return True

    def set_input_shape(self, name: str, shape: Any) -> bool:
        shape = [int(d) for d in shape]
        profiles = self.engine.plan["profiles"]
        if profiles and name in profiles[self.profile]:
            low, _, high = profiles[self.profile][name]
            if len(shape) != len(low) or not all(
                lo <= s <= hi for lo, s, hi in zip(low, shape, high, strict=False)
            ):
                _record("error", f"setInputShape: '{name}' {shape} is outside profile {self.profile}")
                return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> Dims:
        if name in self.shapes:
            return Dims(self.shapes[name])
        if self.engine.get_tensor_mode(name) == TensorIOMode.INPUT:  # type: ignore[attr-defined]
            return self.engine.get_tensor_shape(name)
        return Dims(self._run(zeros=True)[name].shape)

    def get_tensor_address(self, name: str) -> int:
        return self.addresses.get(name, 0)

    def set_tensor_address(self, name: str, memory: int) -> bool:
        self.addresses[name] = memory
        return True

    def set_output_allocator(self, name: str, allocator: IOutputAllocator) -> bool:
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        io = [n for n, _ in self.engine._io]
        missing = [n for n in io if n not in self.addresses and n not in self.allocators] + [
            n for n in self.engine.plan["inputs"] if -1 in self.get_tensor_shape(n)
        ]  # a fixed input needs no set_input_shape
        if missing:
            _record("error", f"enqueueV3: no shape or address for {missing}")
            return False
        _record("execute_async_v3", self.profile, self.shapes)
        for name, value in self._run(zeros=False).items():
            allocator = self.allocators.get(name)
            if allocator is not None:
                address = allocator.reallocate_output_async(name, 0, max(1, value.nbytes), 256, stream_handle)
                allocator.notify_shape(name, Dims(value.shape))
            else:
                address = self.addresses[name]
            ctypes.memmove(address, value.ctypes.data, value.nbytes)
        return True

    def _run(self, zeros: bool) -> dict[str, Any]:
        import numpy as np

        feed = {}
        for name in self.engine.plan["inputs"]:
            dtype = _NUMPY[self.engine.get_tensor_dtype(name).name]
            shape = list(self.get_tensor_shape(name))
            if zeros:
                feed[name] = np.zeros(shape, dtype)
            else:
                size = int(np.prod(shape)) * np.dtype(dtype).itemsize
                raw = (ctypes.c_char * size).from_address(self.addresses[name])
                feed[name] = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return self.engine.outputs(feed)


_NUMPY = {
    "FLOAT": "float32",
    "HALF": "float16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
}


class Runtime:
    def __init__(self, logger: ILogger) -> None:
        _record("Runtime")

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        data = bytes(serialized_engine)
        if not data.startswith(PLAN_MAGIC):
            return None
        plan = json.loads(data[len(PLAN_MAGIC) :])
        if plan["version"] != __version__:
            _record("error", f"the plan was built by TensorRT {plan['version']}, this is {__version__}")
            return None
        return ICudaEngine(plan)
