"""Run a plan on the evaluation inputs (in the worker, on the GPU) with Polygraphy's
``EngineFromBytes`` and ``TrtRunner``, and time it at each profile's opt shape with TensorRT's
own execution context on Polygraphy's device arrays and stream (Polygraphy 0.53.6, TensorRT
10.8-11.x; what touches TensorRT directly is checked by mypy against tensorrt-stubs)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from builder.engines.profiles import ProfileShapes, opt_batches, profile_for

if TYPE_CHECKING:
    import tensorrt as trt


def verification_batches(batch_size: int, profiles: list[ProfileShapes]) -> list[int]:
    """The batch sizes the evaluation set runs at: each profile's opt batch and the max batch,
    so that Triton's rule picks every profile (0: an unbatched model, one sample at a time)."""
    if not batch_size:
        return [0]
    return sorted({*(b for b in opt_batches(profiles) if 0 < b <= batch_size), batch_size})


def run_all(
    plan: bytes, inputs: Mapping[str, NDArray[Any]], batch_size: int, profiles: list[ProfileShapes]
) -> dict[str, NDArray[Any]]:
    """Outputs at every verification batch size, keyed ``"<batch>:<output>"``."""
    return {
        f"{b}:{name}": value
        for b in verification_batches(batch_size, profiles)
        for name, value in run_plan(plan, inputs, b, profiles).items()
    }


def run_plan(
    plan: bytes,
    inputs: Mapping[str, NDArray[Any]],
    batch_size: int,
    profiles: list[ProfileShapes] | None = None,
) -> dict[str, NDArray[Any]]:
    """Outputs for every sample, fed ``batch_size`` at a time (0: one unbatched sample at a time),
    each batch under the profile Triton would choose for its shapes (not only profile 0)."""
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    feeds = list(batches(inputs, batch_size))
    chosen = [
        profile_for({k: v.shape for k, v in f.items()}, profiles or [], batching=batch_size > 0)
        for f in feeds
    ]
    engine = EngineFromBytes(plan)()
    results: dict[int, dict[str, NDArray[Any]]] = {}
    for profile in sorted(set(chosen)):
        with TrtRunner(engine, optimization_profile=profile) as runner:
            for i in (i for i, p in enumerate(chosen) if p == profile):
                # copy: the runner reuses its buffers
                results[i] = {
                    name: np.array(value) for name, value in runner.infer(feed_dict=feeds[i]).items()
                }
    chunks: dict[str, list[NDArray[Any]]] = {}
    for i in range(len(feeds)):
        for name, array in results[i].items():
            chunks.setdefault(name, []).append(array if batch_size else array[None])
    return {name: np.concatenate(parts) for name, parts in chunks.items()}


def profiles_run(
    inputs: Mapping[str, NDArray[Any]], batch_size: int, profiles: list[ProfileShapes]
) -> list[int]:
    """The profiles :func:`run_all` exercises on these inputs."""
    return sorted(
        {
            profile_for({k: v.shape for k, v in f.items()}, profiles, batching=batch_size > 0)
            for b in verification_batches(batch_size, profiles)
            for f in batches(inputs, b)
        }
    )


def batches(inputs: Mapping[str, NDArray[Any]], batch_size: int) -> Iterator[dict[str, NDArray[Any]]]:
    count = len(next(iter(inputs.values())))
    step = batch_size or 1
    for start in range(0, count, step):
        if batch_size:
            yield {k: np.ascontiguousarray(v[start : start + step]) for k, v in inputs.items()}
        else:
            yield {k: np.ascontiguousarray(v[start]) for k, v in inputs.items()}


def opt_feeds(
    inputs: Mapping[str, NDArray[Any]], batch_size: int, profiles: list[ProfileShapes]
) -> list[tuple[dict[str, NDArray[Any]], int]]:
    """One feed per profile at its opt shape (evaluation samples repeated where their shape
    fits, zeros where it does not), with its sample count; without profiles, the first batch."""
    if not profiles:
        feed = next(batches(inputs, batch_size))
        return [(feed, len(next(iter(feed.values()))) if batch_size else 1)]
    out = []
    for ranges in profiles:
        feed = {}
        for r in ranges:
            data = inputs[r.name] if batch_size else inputs[r.name][0]
            fits = data.shape[1:] == r.opt[1:] if batch_size else data.shape == r.opt
            feed[r.name] = np.resize(data, r.opt) if fits else np.zeros(r.opt, data.dtype)
        out.append((feed, ranges[0].opt[0] if batch_size else 1))
    return out


def time_profiles(
    plan: bytes,
    inputs: Mapping[str, NDArray[Any]],
    batch_size: int,
    profiles: list[ProfileShapes],
    rounds: int = 5,
    launches: int = 20,
) -> list[float]:
    """Milliseconds per sample at each profile's opt shape, the inputs already on the GPU: the
    median over ``rounds`` of ``launches`` back-to-back ``execute_async_v3`` calls timed with
    CUDA events on the stream (no host copies, allocation or per-call sync, which for a large
    input such as a batch of images would weigh like the compute)."""
    from polygraphy.backend.trt import EngineFromBytes

    engine: trt.ICudaEngine = EngineFromBytes(plan)()  # raises when the plan does not deserialize
    return [
        _time_profile(engine, index, feed, samples, rounds, launches)
        for index, (feed, samples) in enumerate(opt_feeds(inputs, batch_size, profiles))
    ]


def _time_profile(
    engine: trt.ICudaEngine,
    profile: int,
    feed: dict[str, NDArray[Any]],
    samples: int,
    rounds: int,
    launches: int,
) -> float:
    from polygraphy import cuda

    context = engine.create_execution_context()
    stream = cuda.Stream()
    buffers: list[Any] = []
    try:
        try:  # TensorRT's bindings raise RuntimeError here, never return False
            context.set_optimization_profile_async(profile, stream.ptr)
        except RuntimeError:
            raise RuntimeError(f"the plan has no optimization profile {profile}") from None
        for name, value in feed.items():
            if not context.set_input_shape(name, list(value.shape)):
                raise RuntimeError(f"input '{name}' shape {list(value.shape)} is outside profile {profile}")
        buffers = [_bind(engine, context, i, feed, stream) for i in range(engine.num_io_tensors)]
        _launch(context, stream, 3)  # warm-up
        stream.synchronize()
        times = [_timed_ms(context, stream, launches) / launches for _ in range(rounds)]
    finally:
        for buffer in buffers:
            buffer.free()
        stream.free()
    return sorted(times)[len(times) // 2] / samples


def _bind(
    engine: trt.ICudaEngine,
    context: trt.IExecutionContext,
    index: int,
    feed: dict[str, NDArray[Any]],
    stream: Any,
) -> Any:
    import tensorrt as trt
    from polygraphy import cuda

    name = engine.get_tensor_name(index)
    if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
        buffer = cuda.DeviceArray(shape=feed[name].shape, dtype=feed[name].dtype)
        buffer.copy_from(feed[name], stream)
    else:
        shape = context.get_tensor_shape(name)
        dims = [shape[d] for d in range(len(shape))]
        if any(d < 0 for d in dims):
            raise RuntimeError(f"output '{name}' has a data-dependent shape {dims}")
        item: int = engine.get_tensor_dtype(name).itemsize
        buffer = cuda.DeviceArray.raw((max(1, int(np.prod(dims)) * item),))
    context.set_tensor_address(name, buffer.ptr)
    return buffer


def _launch(context: trt.IExecutionContext, stream: Any, count: int) -> None:
    for _ in range(count):
        if not context.execute_async_v3(stream.ptr):
            raise RuntimeError("execute_async_v3 failed (TensorRT's log says why)")


def _timed_ms(context: trt.IExecutionContext, stream: Any, launches: int) -> float:
    """Milliseconds of GPU time for ``launches`` back-to-back runs: CUDA events recorded on the
    stream before and after (cudaEventElapsedTime), through the runtime Polygraphy loaded."""
    from polygraphy import cuda

    cudart = cuda.wrapper().handle
    on = ctypes.c_void_p(stream.ptr)
    start, end = ctypes.c_void_p(), ctypes.c_void_p()
    _cuda(cudart.cudaEventCreate(ctypes.byref(start)), "cudaEventCreate")
    _cuda(cudart.cudaEventCreate(ctypes.byref(end)), "cudaEventCreate")
    try:
        _cuda(cudart.cudaEventRecord(start, on), "cudaEventRecord")
        _launch(context, stream, launches)
        _cuda(cudart.cudaEventRecord(end, on), "cudaEventRecord")
        _cuda(cudart.cudaEventSynchronize(end), "cudaEventSynchronize")
        ms = ctypes.c_float()
        _cuda(cudart.cudaEventElapsedTime(ctypes.byref(ms), start, end), "cudaEventElapsedTime")
        return float(ms.value)
    finally:
        cudart.cudaEventDestroy(start)
        cudart.cudaEventDestroy(end)


def _cuda(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} failed with CUDA error {status}")
