"""Third-party output goes to the log, from Python and from C (file descriptors) alike."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from builder.llm.quiet import output_to


def test_output_to_log(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "logs" / "stage.log"
    with output_to(log):
        print("from print")
        sys.stderr.write("from sys.stderr\n")
        os.write(2, b"from fd 2\n")
        os.write(1, b"from fd 1\n")
    print("after")
    text = log.read_text()
    for line in ("from print", "from sys.stderr", "from fd 2", "from fd 1"):
        assert line in text
    out, err = capfd.readouterr()
    assert "from" not in out + err and "after" in out
