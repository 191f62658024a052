"""Third-party output goes to the stage log; bars with counts on a terminal only."""

from __future__ import annotations

import io
import os
import sys
import time
import warnings
from pathlib import Path

import pytest

from builder import progress as progress_module
from builder.progress import progress, quiet


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quiet_sends_warnings_prints_and_fd_writes_to_the_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "stage" / "export.log"
    with quiet(log):
        warnings.warn("TracerWarning: converting a tensor to a Python boolean", stacklevel=1)
        print("Loading weights: 100%")
        sys.stderr.write("a bar on stderr\n")
        os.write(1, b"C++ says hello on fd 1\n")
        os.write(2, b"C++ says hello on fd 2\n")
    print("after")
    text = log.read_text()
    for line in ("TracerWarning", "Loading weights", "a bar on stderr", "fd 1", "fd 2"):
        assert line in text, line
    out, err = capfd.readouterr()
    assert out == "after\n" and "hello" not in err and "TracerWarning" not in err


def test_quiet_restores_the_streams_after_an_error(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    stdout = sys.stdout
    with pytest.raises(RuntimeError), quiet(tmp_path / "x.log"):
        raise RuntimeError("stage failed")
    assert sys.stdout is stdout
    os.write(1, b"visible\n")
    assert "visible" in capfd.readouterr().out


def test_no_bar_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress(3, "int8 calibration") as bar:
        for _ in range(3):
            bar.advance()
    assert bar.done == 3
    assert capsys.readouterr().err == ""


def test_bar_with_counts_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr(progress_module, "_terminal", [terminal])
    with progress(4, "verify resnet18 int8", unit="sample") as bar:
        bar.advance(2)
        time.sleep(0.15)  # tqdm redraws at most every 0.1 s
        bar.advance(2)
    shown = terminal.getvalue()
    assert "verify resnet18 int8" in shown and "4/4" in shown
    assert max(len(line) for line in shown.replace("\r", "\n").splitlines()) <= 120
