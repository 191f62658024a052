"""The CUDA runtime on a pip-only GPU host, and CUDA_VISIBLE_DEVICES (real libraries where they exist)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from builder.engines import detect as detect_module
from builder.engines.cuda_runtime import cudart_dirs, first_device, visible_index, with_cudart
from builder.engines.isolate import worker_env


def test_the_cuda_13_wheel_folder_is_found_where_polygraphy_does_not_look(tmp_path, monkeypatch) -> None:
    from polygraphy.cuda import cuda as polygraphy_cuda

    site = tmp_path / "site-packages"
    lib = site / "nvidia" / "cu13" / "lib"  # nvidia-cuda-runtime 13's layout
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"")
    assert cudart_dirs([str(site)], env={})[0] == lib
    monkeypatch.setattr("sys.path", [str(site)])
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    assert str(lib) not in polygraphy_cuda._find_cuda_lib_dirs()
    monkeypatch.setenv("LD_LIBRARY_PATH", with_cudart({}, [lib])["LD_LIBRARY_PATH"])
    assert str(lib) in polygraphy_cuda._find_cuda_lib_dirs()


def test_the_build_worker_gets_the_runtime_folders_on_its_library_path() -> None:
    env = worker_env()
    for folder in cudart_dirs():
        assert str(folder) in env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert with_cudart({"LD_LIBRARY_PATH": "/a"}, [Path("/a"), Path("/b")])["LD_LIBRARY_PATH"] == "/a:/b"


def test_this_machines_cuda_runtime_answers_no_device() -> None:
    dirs = cudart_dirs()
    if not dirs:
        pytest.skip("no libcudart on this machine")
    device, why = first_device(dirs)
    if device is not None:
        pytest.skip(f"a GPU is present: {device}")
    assert why.startswith("no CUDA device (libcudart.so") and "cudaError" in why, why


ROWS = [("0", "GPU-8f3c2b1a-aaaa"), ("1", "GPU-1d9e77c0-bbbb")]


@pytest.mark.parametrize(
    ("visible", "chosen"),
    [(None, 0), ("1", 1), ("1,0", 1), ("GPU-1d9e", 1), ("0", 0), ("", None), ("-1", None), ("2", None)],
)
def test_cuda_visible_devices_picks_cudas_device_0(visible, chosen) -> None:
    assert visible_index(ROWS, visible) == chosen


SMI = """#!/bin/bash
[[ "$1" == --query-gpu=index,uuid,name,compute_cap ]] || exit 2
echo "0, GPU-8f3c2b1a-aaaa, NVIDIA A10, 8.6"
echo "1, GPU-1d9e77c0-bbbb, NVIDIA L4, 8.9"
"""


@pytest.mark.parametrize(
    ("visible", "gpu"),
    [(None, ("NVIDIA A10", "8.6")), ("1", ("NVIDIA L4", "8.9")), ("GPU-1d9e77c0", ("NVIDIA L4", "8.9"))],
)
def test_the_nvidia_smi_fallback_respects_cuda_visible_devices(tmp_path, monkeypatch, visible, gpu) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found, _ = detect_module._gpu_from_nvidia_smi()
    assert found is not None and (found.name, found.compute_capability) == gpu
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_module._gpu_from_nvidia_smi() == (
        None,
        "no CUDA device (CUDA_VISIBLE_DEVICES='' selects none of nvidia-smi's GPUs)",
    )
