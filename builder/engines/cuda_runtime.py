"""Finding the CUDA runtime (``libcudart``) on a GPU host without a CUDA toolkit.

A pip-only host (``pip install 'tritonforge[gpu]'``) has libcudart only inside
the NVIDIA wheels: ``nvidia/cuda_runtime/lib`` (CUDA 12) or ``nvidia/cu13/lib``
(CUDA 13). Polygraphy looks on ``LD_LIBRARY_PATH``, a few fixed folders and the
CUDA 12 wheel folder only, so the build worker gets every folder found here on
its ``LD_LIBRARY_PATH``. Device 0 is queried through the runtime itself, which
honours ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_WHEEL_FOLDERS = ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "nvidia/cu12/lib")
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76  # cudaDevAttrComputeCapabilityMajor / Minor
_PROPS_BYTES = 4096  # more than any CUDA release's cudaDeviceProp; the name comes first


def cudart_dirs(paths: Iterable[str] | None = None, env: Mapping[str, str] | None = None) -> list[Path]:
    """Folders holding ``libcudart.so*``: the NVIDIA wheels on ``sys.path``, then CUDA_HOME/CUDA_PATH
    and /usr/local/cuda (``lib64``)."""
    env = os.environ if env is None else env
    roots = [Path(p) for p in (sys.path if paths is None else paths) if p]
    found = [root / sub for root in roots for sub in _WHEEL_FOLDERS]
    toolkits = [env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), "/usr/local/cuda"]
    found += [Path(t) / "lib64" for t in toolkits if t]
    dirs = [d for d in found if d.is_dir() and any(d.glob("libcudart.so*"))]
    return list(dict.fromkeys(dirs))


def with_cudart(env: Mapping[str, str], dirs: Iterable[Path] | None = None) -> dict[str, str]:
    """``env`` with the libcudart folders appended to ``LD_LIBRARY_PATH`` (for the build worker)."""
    out = dict(env)
    current = [p for p in out.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    extra = [str(d) for d in (cudart_dirs(env=env) if dirs is None else dirs) if str(d) not in current]
    if extra:
        out["LD_LIBRARY_PATH"] = os.pathsep.join(current + extra)
    return out


@dataclass(frozen=True)
class Device:
    name: str
    compute_capability: str


def first_device(dirs: Iterable[Path] | None = None) -> tuple[Device | None, str]:
    """Device 0 as the CUDA runtime numbers them; (None, why) without a runtime or a device."""
    libraries = [
        lib for d in (cudart_dirs() if dirs is None else dirs) for lib in sorted(d.glob("libcudart.so*"))
    ]
    if not libraries:
        return None, "no CUDA runtime (libcudart) found"
    try:
        cudart = ctypes.CDLL(str(libraries[0]))
    except OSError as exc:
        return None, f"the CUDA runtime {libraries[0].name} does not load ({exc})"
    return _query(cudart, libraries[0].name)


def _query(cudart: ctypes.CDLL, library: str) -> tuple[Device | None, str]:
    count = ctypes.c_int(0)
    err = int(cudart.cudaGetDeviceCount(ctypes.byref(count)))
    if err != 0 or count.value == 0:
        return None, f"no CUDA device ({library}: {_error_name(cudart, err) if err else 'no device visible'})"
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    for value, attribute in ((major, _ATTR_CC_MAJOR), (minor, _ATTR_CC_MINOR)):
        err = int(cudart.cudaDeviceGetAttribute(ctypes.byref(value), attribute, 0))
        if err != 0:
            return None, f"no CUDA device ({library}: {_error_name(cudart, err)})"
    return Device(_device_name(cudart), f"{major.value}.{minor.value}"), ""


def _device_name(cudart: ctypes.CDLL) -> str:
    props = ctypes.create_string_buffer(_PROPS_BYTES)
    for symbol in ("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"):
        function = getattr(cudart, symbol, None)
        if function is not None and int(function(props, 0)) == 0:
            return props.raw[:256].split(b"\0", 1)[0].decode(errors="replace")
    return "CUDA device 0"


def _error_name(cudart: ctypes.CDLL, err: int) -> str:
    cudart.cudaGetErrorName.restype = ctypes.c_char_p
    name = cudart.cudaGetErrorName(err)
    return name.decode() if isinstance(name, bytes) else f"error {err}"


def visible_index(rows: list[tuple[str, str]], visible: str | None) -> int | None:
    """Which of nvidia-smi's ``(index, uuid)`` rows is CUDA's device 0 under CUDA_VISIBLE_DEVICES
    (None: no device is visible). CUDA reads the list up to its first invalid entry."""
    if visible is None:
        return 0 if rows else None
    first = visible.split(",")[0].strip()
    if first.startswith("MIG-"):  # a MIG instance of some GPU: nvidia-smi lists the GPUs only
        return 0 if rows else None
    for position, (index, uuid) in enumerate(rows):
        if first and (first == index or (first.startswith("GPU-") and uuid.startswith(first))):
            return position
    return None
