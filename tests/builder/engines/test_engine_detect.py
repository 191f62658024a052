"""Detection on this machine (no TensorRT, no GPU), and with TensorRT but no GPU: all real."""

from __future__ import annotations

import pytest

from builder.engines.detect import detect


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
