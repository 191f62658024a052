"""A build the host refuses (a full disk, here faked: a write in the publish path fails with ENOSPC,
a stage writes to /dev/full) stops with one line naming what and where, exit status 1, the
traceback in a log; never "a defect", never a variant dropped; the repository it would have
replaced stays served as it was."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import onnx
import pytest

from builder import repository
from builder.cli import main
from tests.conftest import tree_digest

pytestmark = pytest.mark.slow
FULL = Path("/dev/full")  # every write to it fails with ENOSPC


def args(project: Path) -> list[str]:
    spec, repo = project / "models.yaml", project / "model_repository"
    return ["build", "--spec", str(spec), "--repo", str(repo), "--target", "local"]


def test_a_full_disk_while_publishing_leaves_the_previous_repository_as_it_was(
    tiny_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tiny_project / "model_repository"
    assert main(args(tiny_project)) == 0
    before = tree_digest(repo)
    monkeypatch.setattr(repository, "repository_key", lambda _: "another")  # something new to publish
    write_text = Path.write_text

    def full(self: Path, data: str, *rest: Any, **options: Any) -> int:
        if ".staging-" in str(self):  # as f.write() fails on a full disk: the error names no file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, data, *rest, **options)

    monkeypatch.setattr(Path, "write_text", full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    capsys.readouterr()
    assert main(args(tiny_project)) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    staging = f"{repo}.staging-{os.getpid()}"
    assert line.startswith(f"error: no space left on device writing {staging}/"), line
    assert ": see the traceback in " in line and "defect" not in line
    log = Path(line.split("see the traceback in ")[1])
    assert (
        "Traceback (most recent call last)" in log.read_text()
        and "No space left on device" in log.read_text()
    )
    assert tree_digest(repo) == before  # still served as it was
    assert sorted(p.name for p in tiny_project.iterdir() if p.name.startswith(repo.name)) == [repo.name]


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_a_full_disk_in_a_stage_stops_the_build_and_drops_no_variant(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def convert_fp16(fp32_onnx: Path, out: Path) -> Path:
        onnx.save_model(onnx.load(str(fp32_onnx)), str(FULL))  # onnx's own frame raises ENOSPC
        return out

    monkeypatch.setattr("builder.stages.fp16.convert_fp16", convert_fp16)
    assert main(args(tiny_project)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith(f"error: no space left on device writing {FULL} (model 'tiny', fp16 stage): "), (
        line
    )
    log = Path(line.split("see the traceback in ")[1])
    assert log.name == "fp16.failure.log" and "Traceback" in log.read_text()
    assert "defect" not in line and not any("not published" in x for x in err)
    assert not (tiny_project / "model_repository").exists()
