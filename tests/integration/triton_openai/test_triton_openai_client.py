"""Triton's own OpenAI-frontend client tests, unchanged, against this project's endpoint.

The tests are triton-inference-server/server's ``python/openai/tests/test_openai_client.py``,
read from a checkout of that repository (``TRITON_SERVER_SOURCE``: its root) and run as they
are: their classes are collected here, with the fixtures of this folder's ``conftest.py``.
Without the checkout the module is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SOURCE_ENV = "TRITON_SERVER_SOURCE"
UPSTREAM = Path("python") / "openai" / "tests" / "test_openai_client.py"


def _upstream() -> Path | None:
    root = os.environ.get(SOURCE_ENV)
    path = Path(root) / UPSTREAM if root else None
    return path if path is not None and path.is_file() else None


_PATH = _upstream()
if _PATH is None:
    pytest.skip(f"set {SOURCE_ENV} to a checkout of triton-inference-server/server (its {UPSTREAM})",
                allow_module_level=True)  # fmt: skip
_SPEC = importlib.util.spec_from_file_location("triton_openai_client_tests", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)

TestOpenAIClient = _MODULE.TestOpenAIClient
TestAsyncOpenAIClient = _MODULE.TestAsyncOpenAIClient
