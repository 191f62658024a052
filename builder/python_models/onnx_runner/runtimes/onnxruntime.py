"""ONNX Runtime on the CPU: all graph optimisations, one run at a time, the intra-op threads and
whether their idle workers spin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ..contract import ALLOW_SPINNING, STOP_SPINNING
from ..utils.sizing import instances, threads

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
    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.inputs = [(i.name, ORT_TYPES.get(i.type)) for i in session.get_inputs()]
        self.run = session.run  # bound once: the hot path calls it directly


def served_session(path: Path, params: dict[str, str], config: dict[str, Any]) -> OrtSession:
    options = session_options(params, config)
    return OrtSession(ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]))


def session_options(params: dict[str, str], config: dict[str, Any]) -> ort.SessionOptions:
    """ONNX Runtime's options for the config: all graph optimisations, one run at a time, the
    intra-op threads and whether their idle workers spin (``stop_spinning``: only while a run is
    going on, ``session.force_spinning_stop``; measured in docs/bench.md, light_cnn)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads(params, config)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not spinning(params, config):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif params.get(STOP_SPINNING, "").lower() in ("1", "true"):
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def spinning(params: dict[str, str], config: dict[str, Any]) -> bool:
    """Whether ORT's idle intra-op workers spin waiting for work: as the config's ``allow_spinning``
    parameter says, else only where the instances' threads leave a core of this machine free
    (``spare_core``). Which wins depends on the machine (docs/bench.md, light_cnn): a worker
    spinning on the core that tritonserver's threads, the stub and the clients need delays every
    hand-off of a request; with other work on two cores, workers that sleep served light_cnn 1.9x
    faster at concurrency 1, and on an idle machine spinning was 6-9 % faster."""
    given = params.get(ALLOW_SPINNING, "").lower()
    if given in ("0", "1", "false", "true"):
        return given in ("1", "true")
    return spare_core(instances(config), threads(params, config), os.cpu_count() or 1)


def spare_core(instances: int, threads: int, cores: int) -> bool:
    """Whether ``instances`` ONNX Runtime sessions of ``threads`` intra-op threads each leave at
    least one of ``cores`` to the server and its clients."""
    return instances * threads < cores
