"""TensorRT network, config and plan: the only module that builds with TensorRT.

Runs in the build worker's process. ``tensorrt`` is imported inside each function so
that importing this module never needs TensorRT; mypy checks every call against
tensorrt-stubs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from builder.engines.profiles import InputRange, ProfileShapes
from builder.engines.request import BuildRequest

if TYPE_CHECKING:
    import tensorrt as trt


class EngineBuildError(Exception):
    """TensorRT refused the model (a parser error or a failed build)."""


def build_plan(req: BuildRequest) -> bytes:
    """Parse the ONNX, configure, build; the timing cache is read before and saved after."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = network_from_onnx(builder, logger, Path(req.onnx), req.strongly_typed)
    config = create_config(builder, network, req)
    cache_path = Path(req.timing_cache)
    use_timing_cache(config, cache_path)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError("TensorRT built no engine (its log above says why)")
    save_timing_cache(config, cache_path)
    return bytes(serialized)


def network_from_onnx(
    builder: trt.Builder, logger: trt.ILogger, onnx: Path, strongly_typed: bool
) -> trt.INetworkDefinition:
    import tensorrt as trt

    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    # parse_from_file, not parse(bytes): it finds external weight files beside the model
    if not parser.parse_from_file(str(onnx)):
        raise EngineBuildError(f"TensorRT's ONNX parser rejected {onnx.name}: " + parser_errors(parser))
    return network


def parser_errors(parser: trt.OnnxParser) -> str:
    messages = []
    for i in range(parser.num_errors):
        error: trt.ParserError = parser.get_error(i)
        node = error.node_name() or f"#{error.node()}"
        messages.append(f"node '{node}' ({error.node_operator()}): {error.desc()}")
    return "; ".join(messages) or "no error recorded"


def create_config(
    builder: trt.Builder, network: trt.INetworkDefinition, req: BuildRequest
) -> trt.IBuilderConfig:
    import tensorrt as trt

    config = builder.create_builder_config()
    if req.workspace_mib is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, req.workspace_mib << 20)
    config.builder_optimization_level = req.optimization_level
    config.hardware_compatibility_level = hardware_compatibility(req.hardware_compatibility)
    for name in req.builder_flags:
        config.set_flag(builder_flag(name))
    profiles = add_profiles(builder, network, config, req.profiles)
    if req.calibration_table is not None:
        set_table_calibrator(config, Path(req.calibration_table), profiles)
    return config


def hardware_compatibility(name: str) -> trt.HardwareCompatibilityLevel:
    import tensorrt as trt

    level = trt.HardwareCompatibilityLevel.__members__.get(name)
    if level is None:  # SAME_COMPUTE_CAPABILITY came in 10.9
        raise EngineBuildError(
            f"TensorRT {trt.__version__} has no HardwareCompatibilityLevel.{name}; "
            f"it has {', '.join(trt.HardwareCompatibilityLevel.__members__)}"
        )
    return level


def builder_flag(name: str) -> trt.BuilderFlag:
    import tensorrt as trt

    # Named one by one: TensorRT 11 has no FP16/INT8 members, and only 10's recipes ask for them.
    if name == "FP16":
        return trt.BuilderFlag.FP16
    if name == "INT8":
        return trt.BuilderFlag.INT8
    raise ValueError(f"unexpected builder flag {name}")


def add_profiles(
    builder: trt.Builder,
    network: trt.INetworkDefinition,
    config: trt.IBuilderConfig,
    shapes: list[ProfileShapes],
) -> list[trt.IOptimizationProfile]:
    import tensorrt as trt

    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    declared = {t.name: [t.shape[d] for d in range(len(t.shape))] for t in inputs}
    profiles = []
    for index, ranges in enumerate(shapes):
        profile = builder.create_optimization_profile()
        for r in ranges:
            if r.name not in declared:
                raise EngineBuildError(f"profiles[{index}]: the ONNX model has no input '{r.name}'")
            misfit = profile_misfit(r, declared[r.name])
            if misfit:  # TensorRT would say so only in build_serialized_network, after parsing
                raise EngineBuildError(f"profiles[{index}]: {misfit}")
            try:
                profile.set_shape(r.name, trt.Dims(list(r.min)), trt.Dims(list(r.opt)), trt.Dims(list(r.max)))
            except ValueError as exc:  # TensorRT checks 0 <= min <= opt <= max and the fixed dims
                raise EngineBuildError(
                    f"profiles[{index}]: TensorRT rejected the shapes of '{r.name}' "
                    f"(min {list(r.min)}, opt {list(r.opt)}, max {list(r.max)}): {exc}"
                ) from None
        if config.add_optimization_profile(profile) < 0:
            raise EngineBuildError(f"profiles[{index}]: TensorRT rejected the profile {ranges}")
        profiles.append(profile)
    return profiles


def profile_misfit(r: InputRange, network_shape: list[int]) -> str | None:
    """Why a profile's shapes do not fit the network input (its rank or a fixed dimension)."""
    for which in ("min", "opt", "max"):
        dims = list(getattr(r, which))
        if len(dims) != len(network_shape) or any(
            fixed not in (-1, d) for fixed, d in zip(network_shape, dims, strict=False)
        ):
            return f"'{r.name}' {which} {dims} does not fit the network's input shape {network_shape}"
    return None


def set_table_calibrator(
    config: trt.IBuilderConfig, table: Path, profiles: list[trt.IOptimizationProfile]
) -> None:
    """TensorRT 10's implicit INT8 with the table the CPU stage wrote (no GPU calibration)."""
    import tensorrt as trt

    from builder.engines.calibrator import table_calibrator, with_header

    config.int8_calibrator = table_calibrator(with_header(table.read_bytes(), trt.__version__))
    if profiles:
        config.set_calibration_profile(profiles[0])


def use_timing_cache(config: trt.IBuilderConfig, path: Path) -> None:
    data = path.read_bytes() if path.is_file() else b""
    cache = config.create_timing_cache(data)
    if not config.set_timing_cache(cache, False):
        # A cache from another TensorRT or GPU: start afresh rather than fail the build.
        config.set_timing_cache(config.create_timing_cache(b""), False)


def save_timing_cache(config: trt.IBuilderConfig, path: Path) -> None:
    data = bytes(config.get_timing_cache().serialize())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
