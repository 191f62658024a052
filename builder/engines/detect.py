"""Is TensorRT usable here? Import plus a CUDA device query, never a TensorRT Runtime
(constructing one without a GPU can crash the process)."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from builder.engines.cuda_runtime import cudart_dirs, first_device, visible_index
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
    cuda: str = ""  # the CUDA the TensorRT build is for ("cu12", "cu13"): one version string, two builds

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
    cuda = cuda_flavour()
    return TensorRTAvailability(
        True,
        f"TensorRT {version}{f' ({cuda})' if cuda else ''} on {gpu.name} (sm {gpu.compute_capability}){note}",
        version,
        gpu,
        cuda,
    )


_FLAVOUR = re.compile(r"^tensorrt[-_](cu\d+)", re.IGNORECASE)


def cuda_flavour(names: list[str] | None = None) -> str:
    """ "cu12" or "cu13" from the installed TensorRT distributions (tensorrt-cu13-bindings, ...);
    empty when none says (a TensorRT from a system package or a container's own)."""
    if names is None:
        names = [d.metadata["Name"] or "" for d in importlib.metadata.distributions()]
    flavours = sorted({m[1].lower() for m in map(_FLAVOUR.match, names) if m})
    return flavours[-1] if len(flavours) == 1 else "+".join(flavours)


def _tensorrt_version() -> tuple[str | None, str]:
    try:
        trt = importlib.import_module("tensorrt")
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        return None, f"TensorRT is not installed ({type(exc).__name__}: {exc})"
    if getattr(trt, "__file__", None) is None:  # a namespace package: type stubs only
        # Not left in sys.modules: a module without a file breaks inspect (torch's export walks them).
        sys.modules.pop("tensorrt", None)
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
    """CUDA's device 0 (``CUDA_VISIBLE_DEVICES`` applies): through cuda-python, else the CUDA
    runtime library itself (the NVIDIA wheels' or a toolkit's), else nvidia-smi. The first
    runtime that loads has the last word: "no device" from it is the answer."""
    for query in (_gpu_from_cuda_python, _gpu_from_libcudart):
        gpu, why, answered = query()
        if answered:
            return gpu, why
    if shutil.which("nvidia-smi"):
        return _gpu_from_nvidia_smi()
    return None, "no CUDA device (no CUDA runtime: neither cuda-python nor libcudart; no nvidia-smi)"


def _gpu_from_cuda_python() -> tuple[GPU | None, str, bool]:
    try:
        from cuda.bindings import runtime as cudart
    except Exception:
        return None, "", False
    try:
        err, count = cudart.cudaGetDeviceCount()
        if int(err) != 0 or not count:
            return None, f"no CUDA device ({_name(err)})", True
        err, props = cudart.cudaGetDeviceProperties(0)
        if int(err) != 0:
            return None, f"no CUDA device ({_name(err)})", True
    except Exception:  # cuda-python without a loadable libcudart: try the library itself
        return None, "", False
    name = (
        props.name.decode(errors="replace").rstrip("\x00")
        if isinstance(props.name, bytes)
        else str(props.name)
    )
    return GPU(name, f"{props.major}.{props.minor}"), "", True


def _gpu_from_libcudart() -> tuple[GPU | None, str, bool]:
    dirs = cudart_dirs()
    if not dirs:
        return None, "", False
    device, why = first_device(dirs)
    return (GPU(device.name, device.compute_capability) if device else None), why, True


def _gpu_from_nvidia_smi() -> tuple[GPU | None, str]:
    """nvidia-smi numbers every GPU and ignores CUDA_VISIBLE_DEVICES: pick CUDA's device 0 here."""
    cmd = ["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"no CUDA device (nvidia-smi: {exc})"
    rows = [[field.strip() for field in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not rows or any(len(r) != 4 for r in rows):
        return None, f"no CUDA device (nvidia-smi: {(out.stderr or out.stdout).strip()[:200]})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    chosen = visible_index([(r[0], r[1]) for r in rows], visible)
    if chosen is None:
        return None, f"no CUDA device (CUDA_VISIBLE_DEVICES={visible!r} selects none of nvidia-smi's GPUs)"
    _, _, name, cc = rows[chosen]
    return GPU(name, cc), ""


def _name(err: object) -> str:
    return str(getattr(err, "name", err))
