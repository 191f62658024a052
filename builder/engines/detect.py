"""Is TensorRT usable here? Import plus a CUDA device query, never a TensorRT Runtime
(constructing one without a GPU can crash the process)."""

from __future__ import annotations

import importlib
import shutil
import subprocess
from dataclasses import dataclass

from builder.engines.versions import NEWEST_MAJOR, OLDEST, unavailable, unsupported


@dataclass(frozen=True)
class GPU:
    name: str
    compute_capability: str  # "8.6"


@dataclass(frozen=True)
class TensorRTAvailability:
    available: bool
    reason: str  # why not, or a one-line description of what was found
    version: str | None = None
    gpu: GPU | None = None

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0]) if self.version else 0


def detect() -> TensorRTAvailability:
    version, why = _tensorrt_version()
    gpu, gpu_why = first_gpu()
    if version is None:
        return TensorRTAvailability(False, why if gpu else f"{why}; {gpu_why}", gpu=gpu)
    if gpu is None:
        return TensorRTAvailability(False, f"TensorRT {version} is installed but {gpu_why}", version)
    lacks = unavailable(version)
    note = f"; this version lacks {', '.join(lacks)}" if lacks else ""
    return TensorRTAvailability(
        True, f"TensorRT {version} on {gpu.name} (sm {gpu.compute_capability}){note}", version, gpu
    )


def _tensorrt_version() -> tuple[str | None, str]:
    try:
        trt = importlib.import_module("tensorrt")
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        return None, f"TensorRT is not installed ({type(exc).__name__}: {exc})"
    if getattr(trt, "__file__", None) is None:  # a namespace package: type stubs only
        return None, "TensorRT is not installed (only its type stubs are)"
    version = getattr(trt, "__version__", None)
    if not isinstance(version, str):
        return None, "the 'tensorrt' module has no __version__ (not TensorRT?)"
    if not hasattr(trt, "Builder") or not hasattr(trt, "OnnxParser"):
        return None, f"TensorRT {version} has no Builder/OnnxParser (a lean or dispatch runtime)"
    why = unsupported(version)
    if why:
        return None, f"{why} (pip install 'tensorrt>={OLDEST[0]}.{OLDEST[1]},<{NEWEST_MAJOR + 1}')"
    return version, ""


def first_gpu() -> tuple[GPU | None, str]:
    """Device 0 through the CUDA runtime (cuda-python), else ``nvidia-smi``."""
    gpu, why = _gpu_from_cudart()
    if gpu is None and shutil.which("nvidia-smi"):
        gpu, why = _gpu_from_nvidia_smi()
    return gpu, why


def _gpu_from_cudart() -> tuple[GPU | None, str]:
    try:
        from cuda.bindings import runtime as cudart
    except Exception:
        return None, "no CUDA device (cuda-python not installed, no nvidia-smi)"
    try:
        err, count = cudart.cudaGetDeviceCount()
        if int(err) != 0 or not count:
            return None, f"no CUDA device ({_name(err)})"
        err, props = cudart.cudaGetDeviceProperties(0)
        if int(err) != 0:
            return None, f"no CUDA device ({_name(err)})"
    except Exception as exc:  # libcudart missing or a driver mismatch
        return None, f"no CUDA device ({type(exc).__name__}: {exc})"
    name = (
        props.name.decode(errors="replace").rstrip("\x00")
        if isinstance(props.name, bytes)
        else str(props.name)
    )
    return GPU(name, f"{props.major}.{props.minor}"), ""


def _gpu_from_nvidia_smi() -> tuple[GPU | None, str]:
    cmd = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"no CUDA device (nvidia-smi: {exc})"
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        return None, f"no CUDA device (nvidia-smi: {(out.stderr or out.stdout).strip()[:200]})"
    name, _, cc = lines[0].rpartition(",")
    return GPU(name.strip(), cc.strip()), ""


def _name(err: object) -> str:
    return str(getattr(err, "name", err))
