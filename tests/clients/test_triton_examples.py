"""Triton's standard example clients for `simple`, unchanged, against the served repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clients._helpers import assert_no_regions

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).parent / "triton_examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("simple_*_client.py"))


def address(url: str) -> str:
    return url.split("://", 1)[-1]


@pytest.mark.parametrize("script", SCRIPTS)
def test_triton_example(triton: Any, script: str) -> None:
    url = address(triton.grpc_url if "_grpc_" in script else triton.http_url)
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "-u", url], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    if "_shm_" in script:
        assert "PASS: system shared memory" in done.stdout
        assert not Path("/dev/shm/input_simple").exists() and not Path("/dev/shm/output_simple").exists()
    elif "_grpc_" in script:
        assert "PASS: infer" in done.stdout
    assert_no_regions(triton)
