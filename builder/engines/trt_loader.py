"""TensorRT network, config and plan through Polygraphy's loaders: the only module that builds.

Runs in the build worker's process. ``NetworkFromOnnxPath`` parses (strongly typed on
TensorRT 11, and for every TensorRT 10 recipe that asks), ``CreateConfig`` adds the
profiles, precision flags, the calibrator with the CPU stage's table as its cache, the
workspace limit, optimization and hardware-compatibility levels and the timing cache, and
``EngineBytesFromNetwork`` builds the plan and saves the timing cache. Written for
Polygraphy 0.53.6 with TensorRT 10.8-11.x (docs/tensorrt.md). What still touches TensorRT
directly (enum members, the parser's errors, the timing-cache fallback) is checked by mypy
against tensorrt-stubs; Polygraphy has no type information, so its objects stay ``Any``
here. Neither package is imported before a build needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.engines.profiles import InputRange, ProfileShapes
from builder.engines.request import BuildRequest

if TYPE_CHECKING:
    import tensorrt as trt


class EngineBuildError(Exception):
    """TensorRT refused the model (a parser error or a failed build)."""


def build_plan(req: BuildRequest) -> bytes:
    """Parse the ONNX, configure, build; the timing cache is read before and saved after."""
    from polygraphy.backend.trt import EngineBytesFromNetwork
    from polygraphy.exception import PolygraphyException

    network = network_from_onnx(Path(req.onnx), req.strongly_typed)
    check_profiles(network[1], req.profiles)
    cache = Path(req.timing_cache)
    cache.parent.mkdir(parents=True, exist_ok=True)  # Polygraphy locks `<cache>.lock` beside it
    build = EngineBytesFromNetwork(network, config=create_config(req), save_timing_cache=str(cache))
    try:
        serialized = build()
    except RuntimeError as exc:  # what TensorRT's bindings raise for a call it refuses (set_shape)
        raise EngineBuildError(rejected_shapes(req.profiles, exc)) from None
    except PolygraphyException:  # "Invalid Engine": build_serialized_network returned None
        raise EngineBuildError("TensorRT built no engine (its log above says why)") from None
    return bytes(serialized)


def network_from_onnx(onnx: Path, strongly_typed: bool) -> tuple[Any, ...]:
    """``(builder, network, parser)`` from ``NetworkFromOnnxPath``: ``parse_from_file``, which
    finds external weight files beside the model."""
    from polygraphy.backend.trt import NetworkFromOnnxPath
    from polygraphy.exception import PolygraphyException

    try:
        return tuple(NetworkFromOnnxPath(str(onnx), strongly_typed=strongly_typed)())
    except PolygraphyException:
        # Polygraphy only logs the parser's errors: read them from TensorRT's parser for the message
        raise EngineBuildError(
            f"TensorRT's ONNX parser rejected {onnx.name}: " + reparse_errors(onnx)
        ) from None


def reparse_errors(onnx: Path) -> str:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    parser = trt.OnnxParser(trt.Builder(logger).create_network(0), logger)
    parser.parse_from_file(str(onnx))
    return parser_errors(parser)


def parser_errors(parser: trt.OnnxParser) -> str:
    messages = []
    for i in range(parser.num_errors):
        error: trt.ParserError = parser.get_error(i)
        node = error.node_name() or f"#{error.node()}"
        messages.append(f"node '{node}' ({error.node_operator()}): {error.desc()}")
    return "; ".join(messages) or "no error recorded"


def create_config(req: BuildRequest) -> Any:
    """``CreateConfig`` for the request, then the timing-cache fallback (:func:`fresh_timing_cache`)."""
    import tensorrt as trt
    from polygraphy.backend.trt import CreateConfig, PostprocessConfig

    cache = Path(req.timing_cache)
    pools = {trt.MemoryPoolType.WORKSPACE: req.workspace_mib << 20} if req.workspace_mib is not None else None
    config = CreateConfig(
        fp16="FP16" in req.builder_flags,  # TensorRT 10 only: 11's recipes ask for no flag
        int8="INT8" in req.builder_flags,
        calibrator=table_calibrator(Path(req.calibration_table), Path(req.plan))
        if req.calibration_table
        else None,
        profiles=polygraphy_profiles(req.profiles),
        memory_pool_limits=pools,
        builder_optimization_level=req.optimization_level,
        hardware_compatibility_level=hardware_compatibility(req.hardware_compatibility),
        load_timing_cache=str(cache) if cache.is_file() else None,
    )
    return PostprocessConfig(config, fresh_timing_cache)


def polygraphy_profiles(shapes: list[ProfileShapes]) -> list[Any] | None:
    """One Polygraphy ``Profile`` per spec profile; None for a network of fixed shapes (none
    dynamic: :func:`check_profiles`), so that Polygraphy adds one of those shapes. Its INT8
    calibration takes ``profiles[-1]`` and fails on an empty list."""
    from polygraphy.backend.trt import Profile

    if not shapes:
        return None
    out = []
    for ranges in shapes:
        profile = Profile()
        for r in ranges:
            profile.add(r.name, min=list(r.min), opt=list(r.opt), max=list(r.max))
        out.append(profile)
    return out


def table_calibrator(table: Path, plan: Path) -> Any:
    """TensorRT 10's implicit INT8 from the table the CPU stage wrote (no GPU calibration):
    Polygraphy's ``Calibrator`` with no batches and the table, under the header of the TensorRT
    that reads it, as its cache (a file: Polygraphy sizes the cache with ``fstat``). A cache
    TensorRT cannot use leaves it no batches: the build fails.

    The cache is a copy beside the plan being built: TensorRT may write the cache back through
    the calibrator, and the table itself is in the plan's fingerprint."""
    import tensorrt as trt
    from polygraphy.backend.trt import Calibrator

    from builder.engines.calibrator import with_header

    cache = plan.with_name(plan.name + ".calibration.cache")
    cache.write_bytes(with_header(table.read_bytes(), trt.__version__))
    return Calibrator(data_loader=[], cache=str(cache), BaseClass=trt.IInt8EntropyCalibrator2)


def fresh_timing_cache(
    builder: trt.Builder, network: trt.INetworkDefinition, config: trt.IBuilderConfig
) -> None:
    """A timing cache from another TensorRT or GPU: TensorRT refuses it (Polygraphy asks with
    ``ignore_mismatch=False`` and goes on without one, so none would be saved); start afresh
    rather than fail the build, as the saved cache is then replaced."""
    if config.get_timing_cache() is None:
        config.set_timing_cache(config.create_timing_cache(b""), False)


def hardware_compatibility(name: str) -> trt.HardwareCompatibilityLevel:
    import tensorrt as trt

    level = trt.HardwareCompatibilityLevel.__members__.get(name)
    if level is None:  # SAME_COMPUTE_CAPABILITY came in 10.9
        raise EngineBuildError(
            f"TensorRT {trt.__version__} has no HardwareCompatibilityLevel.{name}; "
            f"it has {', '.join(trt.HardwareCompatibilityLevel.__members__)}"
        )
    return level


def check_profiles(network: trt.INetworkDefinition, shapes: list[ProfileShapes]) -> None:
    """Each profile names inputs of the network with its rank and fixed dims, and a network
    without profiles has no dynamic input: TensorRT would say so only in
    ``build_serialized_network``, after parsing."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    declared = {t.name: [t.shape[d] for d in range(len(t.shape))] for t in inputs}
    if not shapes:
        check_fixed(declared)
    for index, ranges in enumerate(shapes):
        for r in ranges:
            if r.name not in declared:
                raise EngineBuildError(f"profiles[{index}]: the ONNX model has no input '{r.name}'")
            misfit = profile_misfit(r, declared[r.name])
            if misfit:
                raise EngineBuildError(f"profiles[{index}]: {misfit}")


def check_fixed(declared: dict[str, list[int]]) -> None:
    """No profile comes from a spec of fixed dims without batching: the ONNX must agree."""
    for name, shape in declared.items():
        if -1 in shape:
            raise EngineBuildError(
                f"no optimization profile: the spec gives '{name}' fixed dims but the ONNX model's "
                f"input shape is {shape}"
            )


def profile_misfit(r: InputRange, network_shape: list[int]) -> str | None:
    """Why a profile's shapes do not fit the network input (its rank or a fixed dimension)."""
    for which in ("min", "opt", "max"):
        dims = list(getattr(r, which))
        if len(dims) != len(network_shape) or any(
            fixed not in (-1, d) for fixed, d in zip(network_shape, dims, strict=False)
        ):
            return f"'{r.name}' {which} {dims} does not fit the network's input shape {network_shape}"
    return None


def rejected_shapes(shapes: list[ProfileShapes], exc: RuntimeError) -> str:
    """TensorRT's ``set_shape`` refusal, naming the first profile and input that break its rule
    ``0 <= min <= opt <= max`` (Polygraphy adds every profile in one call); another refusal
    as TensorRT words it."""
    for index, ranges in enumerate(shapes):
        for r in ranges:
            if not all(0 <= a <= b <= c for a, b, c in zip(r.min, r.opt, r.max, strict=False)):
                return (
                    f"profiles[{index}]: TensorRT rejected the shapes of '{r.name}' "
                    f"(min {list(r.min)}, opt {list(r.opt)}, max {list(r.max)}): {exc}"
                )
    return f"TensorRT refused the build: {exc}"
