"""ONNX Runtime on the CPU: every precision's graph as it is, all graph optimisations, one run at a
time, the intra-op threads and whether their idle workers spin."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .base import ContainerBackend, CpuRuntime, Feed, Knobs, Runs, threads

ALLOW_SPINNING = "allow_spinning"  # "1"/"0"; unset: spin only where a core is left free
STOP_SPINNING = "stop_spinning"  # "1": workers spin only while a run goes on (docs/bench.md, light_cnn)
QUIET = 4  # ORT's log severity: fatal only

# ONNX Runtime's type strings for the inputs it may be given.
ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


class OrtSession:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.inputs = [(i.name, ORT_TYPES.get(i.type)) for i in session.get_inputs()]
        self.output_names: list[str] = [o.name for o in session.get_outputs()]
        self.computed_in: str | None = None  # ONNX Runtime computes each node in its graph's types

    def run(self, names: Sequence[str] | None, feed: Feed) -> list[NDArray[Any]]:
        return list(self.session.run(names, feed))


class OnnxRuntime(CpuRuntime):
    name = "onnxruntime"
    distribution = "onnxruntime"
    # int8_dynamic is ONNX Runtime's own dynamic quantization; its INT8 kernels run on AVX2 (the
    # static INT8 graph is made with 7-bit weights on a CPU without VNNI: builder/host.py).
    precisions: ClassVar[Mapping[str, Runs]] = {p: Runs() for p in ("fp32", "fp16", "int8", "int8_dynamic")}
    stub_memory = 64 * 2**20  # tritonserver 2.51's stub, Python 3.11, onnxruntime 1.31

    def parameters(self, knobs: Knobs, *, served: bool = True) -> dict[str, str]:
        params = super().parameters(knobs, served=served)
        if knobs.spinning is not None:  # unset: spin only with a core to spare (``spinning``)
            params[ALLOW_SPINNING] = "1" if knobs.spinning else "0"
        return params

    def open(
        self, model: Path | bytes, precision: str, params: Mapping[str, str], *, instances: int = 1,
        quiet: bool = False,
    ) -> OrtSession:  # fmt: skip
        import onnxruntime as ort

        options = session_options(params, instances)
        if quiet:
            options.log_severity_level = QUIET
        source = str(model) if isinstance(model, Path) else model
        # A graph ONNX Runtime refuses raises its own exception: the stages' guard names it.
        return OrtSession(ort.InferenceSession(source, options, providers=["CPUExecutionProvider"]))

    def container(self, knobs: Knobs, max_batch_size: int) -> ContainerBackend:
        params = {"intra_op_thread_count": str(knobs.threads)} if knobs.threads else {}
        return ContainerBackend(
            platform="onnxruntime_onnx", precisions=frozenset(self.precisions), parameters=params
        )


def session_options(params: Mapping[str, str], instances: int) -> Any:
    """ONNX Runtime's options for the parameters: all graph optimisations, one run at a time, the
    intra-op threads and whether their idle workers spin (``stop_spinning``: only while a run is
    going on, ``session.force_spinning_stop``; measured in docs/bench.md, light_cnn)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads(params, instances)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not spinning(params, instances):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif params.get(STOP_SPINNING, "").lower() in ("1", "true"):
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def spinning(params: Mapping[str, str], instances: int, cores: int | None = None) -> bool:
    """Whether ORT's idle intra-op workers spin waiting for work: as the ``allow_spinning``
    parameter says, else only where the instances' threads leave a core of this machine free
    (``spare_core``). Which wins depends on the machine (docs/bench.md, light_cnn): a worker
    spinning on the core that tritonserver's threads, the stub and the clients need delays every
    hand-off of a request; with other work on two cores, workers that sleep served light_cnn 1.9x
    faster at concurrency 1, and on an idle machine spinning was 6-9 % faster."""
    given = params.get(ALLOW_SPINNING, "").lower()
    if given in ("0", "1", "false", "true"):
        return given in ("1", "true")
    return spare_core(instances, threads(params, instances), cores or os.cpu_count() or 1)


def spare_core(instances: int, threads: int, cores: int) -> bool:
    """Whether ``instances`` ONNX Runtime sessions of ``threads`` intra-op threads each leave at
    least one of ``cores`` to the server and its clients."""
    return instances * threads < cores
