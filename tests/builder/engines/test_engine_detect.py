"""Detection on this machine (no TensorRT, no GPU), and with TensorRT but no GPU: all real."""

from __future__ import annotations

import pytest

from builder.engines import detect as detect_module
from builder.engines.detect import GPU, detect


def test_detect_says_why_without_crashing() -> None:
    found = detect()
    if found.available:
        pytest.skip("TensorRT and a GPU are present")
    assert "TensorRT" in found.reason and found.version is None


def test_detect_with_tensorrt_but_no_gpu(trt10) -> None:
    found = detect()
    if found.gpu is not None:
        pytest.skip("a GPU is present")
    assert not found.available
    assert found.reason.startswith("TensorRT 10.13.0.35 is installed but no CUDA device")


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("10.7.0.23", "TensorRT 10.7.0.23 is older than 10.8, the oldest this builder supports"),
        ("12.0.0.1", "TensorRT 12.0.0.1 is newer than this builder knows (TensorRT 10.8 to 11.x)"),
    ],
)
def test_a_tensorrt_outside_the_supported_range_is_not_used(monkeypatch, tmp_path, version, why) -> None:
    from engine_support import _install_double

    for _ in _install_double(monkeypatch, tmp_path, version):
        monkeypatch.setattr(detect_module, "first_gpu", lambda: (GPU("NVIDIA A10", "8.6"), ""))
        found = detect()
        assert not found.available and found.reason.startswith(why)
        assert "pip install 'tensorrt>=10.8,<12'" in found.reason


def test_tensorrt_10_8_is_used_and_says_what_it_lacks(trt108, monkeypatch) -> None:
    monkeypatch.setattr(detect_module, "first_gpu", lambda: (GPU("NVIDIA A10", "8.6"), ""))
    found = detect()
    assert found.available and found.version == "10.8.0.43"
    assert found.reason.endswith("lacks HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY (from 10.9)")
