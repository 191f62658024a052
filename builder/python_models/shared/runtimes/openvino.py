"""OpenVINO on the CPU: the ONNX graph read as it is, compiled for one stream of
``INFERENCE_NUM_THREADS`` at the variant's precision: bf16 where the CPU has AVX-512 BF16 or AMX,
f32 otherwise, forced (OpenVINO's default is bf16 on such CPUs). The precision the compiled model
really uses is read back (``computed_in``), never assumed.

Left out: fp16 (the CPU plugin computes an FP16 graph in f32 or bf16: the fp32 and bf16 variants
already are those) and int8_dynamic (OpenVINO does not lower ONNX Runtime's dynamic quantization:
2.3x slower than ONNX Runtime on it)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from numpy.typing import NDArray

from .base import (
    BF16_FLAGS,
    ContainerBackend,
    CpuRuntime,
    Feed,
    Knobs,
    Runs,
    RuntimeRefused,
    Sizing,
    first_line,
    threads,
)

CACHE = "openvino_cache"  # parameter: a folder in the model's folder for OpenVINO's compiled blobs
HINT = "performance_hint"  # parameter: OpenVINO's PERFORMANCE_HINT (unset: LATENCY)
STREAMS = "num_streams"  # parameter: OpenVINO's NUM_STREAMS (unset: 1)
PINNING = "cpu_pinning"  # parameter: "1" pins each thread to a core (bench/cpu_runtimes.py); unset: not


class OpenVinoSession:
    """A compiled model and one infer request per calling thread (a request is not shared)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.inputs = [(p.get_any_name(), p.get_element_type().to_dtype()) for p in compiled.inputs]
        self.output_names = [p.get_any_name() for p in compiled.outputs]
        self.index = {name: i for i, p in enumerate(compiled.outputs) for name in p.get_names()}
        self.computed_in: str | None = str(compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
        self.local = threading.local()

    def run(self, names: Sequence[str] | None, feed: Feed) -> list[NDArray[Any]]:
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        results = request.infer(dict(feed)).to_tuple()  # copies: the request's buffers are reused
        return [results[self.index[n]] for n in names or self.output_names]


class OpenVino(CpuRuntime):
    name = "openvino"
    distribution = "openvino"
    # The inference precision each variant compiles for, and reads back: f32 for fp32 and for the
    # float parts of a Q/DQ INT8 graph (its INT8 parts run in INT8 whatever the hint).
    precisions: ClassVar[Mapping[str, Runs]] = {
        "fp32": Runs("f32"), "int8": Runs("f32"), "bf16": Runs("bf16", frozenset(BF16_FLAGS))
    }  # fmt: skip
    stub_memory = 86 * 2**20  # tritonserver 2.51's stub, Python 3.11, openvino 2026.4: its CPU plugin

    def parameters(self, knobs: Knobs, *, served: bool = True) -> dict[str, str]:
        params = super().parameters(knobs, served=served) | ({CACHE: CACHE} if served else {})
        if knobs.hint is not None:
            params[HINT] = knobs.hint
        if knobs.streams is not None:
            params[STREAMS] = str(knobs.streams)
        return params

    def sizings(self, cores: int, base: Knobs, instances: int | None = None) -> list[Sizing]:
        """Beside the instance counts at the latency hint, one instance at the throughput hint with
        a stream per core: OpenVINO's own way to share a machine (measured like the others: a
        served instance runs one call at a time, which one stream then serves)."""
        sized = super().sizings(cores, base, instances)
        if cores > 1 and instances in (None, 1):
            threads = base.threads or cores
            sized.append(
                Sizing(1, replace(base, threads=threads, hint="THROUGHPUT", streams=min(cores, threads)))
            )
        return sized

    def open(
        self, model: Path | bytes, precision: str, params: Mapping[str, str], *, instances: int = 1,
        quiet: bool = False,
    ) -> OpenVinoSession:  # fmt: skip
        """Compiled unpinned: each served instance is a process of its own, and OpenVINO pins a
        process's threads from core 0 up without knowing of the others, so two one-thread
        instances both ran on core 0 (bench/results/cpu_runtimes_pinning.json). Compiled blobs are
        cached in the model's folder where it is writable, so a restart does not compile again."""
        if not isinstance(model, Path):
            raise TypeError("OpenVINO opens a graph's file")
        try:
            import openvino as ov
        except ImportError as exc:
            raise RuntimeRefused(f"OpenVINO cannot be imported here ({exc})") from exc
        core = ov.Core()
        cache = _cache(model, params)
        if cache is not None:
            core.set_property({"CACHE_DIR": str(cache)})
        config = {
            "INFERENCE_PRECISION_HINT": str(self.precisions[precision].computes),
            "PERFORMANCE_HINT": params.get(HINT, "LATENCY"),
            "NUM_STREAMS": params.get(STREAMS, "1"),
            "INFERENCE_NUM_THREADS": str(threads(params, instances)),
            "ENABLE_CPU_PINNING": "YES" if params.get(PINNING) == "1" else "NO",
        }
        try:
            return OpenVinoSession(core.compile_model(str(model), "CPU", config))
        except RuntimeError as exc:  # OpenVINO's own refusal of the graph
            raise RuntimeRefused(f"OpenVINO cannot compile the graph: {first_line(exc)}") from exc

    def container(self, knobs: Knobs, max_batch_size: int) -> ContainerBackend:
        """Triton's openvino backend (r25.10 accepts these keys and no others): bf16, one stream at
        the latency hint as the local target compiles, batches padded to ``max_batch_size`` (the
        backend refuses any other batch without it). Its only precision parameter is
        ``HINT_BF16`` (``YES``; nothing forces f32), so it serves bf16 alone, and under the
        model's name only where the spec pins OpenVINO: every run costs a full batch (targets.md)."""
        params = {
            "HINT_BF16": "YES",
            "PERFORMANCE_HINT": knobs.hint or "LATENCY",
            "NUM_STREAMS": str(knobs.streams or 1),
        }
        if max_batch_size > 0:
            params["ENABLE_BATCH_PADDING"] = "YES"
        if knobs.threads:
            params["INFERENCE_NUM_THREADS"] = str(knobs.threads)
        return ContainerBackend(backend="openvino", precisions=frozenset({"bf16"}), parameters=params,
                                pinned_only=True)  # fmt: skip


def _cache(model: Path, params: Mapping[str, str]) -> Path | None:
    name = params.get(CACHE, "")
    if not name:
        return None
    folder = model.parent / name
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None  # a read-only repository: compile at every start
    return folder if os.access(folder, os.W_OK) else None
