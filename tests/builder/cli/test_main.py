"""The command line's last word on a failure: the host refusing what a command needs is one line
naming what and where, exit status 1, the traceback in a log, neither "a defect" nor the user's
input; a file of the user's that cannot be read stays the user's error (exit status 2)."""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.cli import build as build_command
from builder.cli import main
from builder.errors import EnvironmentFault

WHERE = "/srv/model_repository.staging-7/resnet18/config.pbtxt"
FAULTS: list[tuple[BaseException, str]] = [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), WHERE), f"no space left on device writing {WHERE}"),
    (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), WHERE), f"disk quota exceeded writing {WHERE}"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS), WHERE), f"read-only file system writing {WHERE}"),
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), WHERE), f"permission denied on {WHERE}"),
    (PermissionError(errno.EPERM, os.strerror(errno.EPERM), WHERE), f"operation not permitted on {WHERE}"),
    (OSError(errno.ENOMEM, os.strerror(errno.ENOMEM)), "out of memory"),
    (MemoryError(), "out of memory"),
    (OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE)), "address already in use"),
    (
        OSError(errno.EMFILE, os.strerror(errno.EMFILE), WHERE),
        f"too many open files (this process's limit) opening {WHERE}",
    ),
    (
        OSError(errno.ENFILE, os.strerror(errno.ENFILE), WHERE),
        f"too many open files (the system's limit) opening {WHERE}",
    ),
]


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the command line keeps tracebacks (under the temporary folder)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path / "tmp" / "tritonforge"


def build_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> Callable[[Path], int]:
    def run(_: object) -> int:
        raise error

    monkeypatch.setattr(build_command, "run", run)
    return lambda spec: main(["build", "--spec", str(spec), "--repo", str(spec.parent / "model_repository")])


@pytest.mark.parametrize(
    ("error", "what"), FAULTS, ids=[w.split(" ")[0] + str(i) for i, (_, w) in enumerate(FAULTS)]
)
def test_the_hosts_refusal_is_one_line_exit_1_and_its_traceback_in_a_log(
    error: BaseException, what: str, tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert build_raising(monkeypatch, error)(tmp_path / "models.yaml") == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {what}: see the traceback in {logs}"), line
    assert "defect" not in line and "models.yaml" not in line
    log = Path(line.split("see the traceback in ")[1])
    assert log.parent == logs and "Traceback (most recent call last)" in log.read_text()


def test_a_fault_a_stage_logged_names_the_stage_log(
    tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stage_log = tmp_path / "cache" / "m" / "fp16.failure.log"
    fault = EnvironmentFault(f"no space left on device writing {tmp_path} (model 'm', fp16 stage)", stage_log)
    assert build_raising(monkeypatch, fault)(tmp_path / "models.yaml") == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {fault.what}: see the traceback in {stage_log}"
    assert not logs.exists()  # the stage's log holds it


def test_where_no_log_can_be_written_the_traceback_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tmp").write_text("a file where the log's folder would be")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), WHERE)
    assert build_raising(monkeypatch, error)(tmp_path / "models.yaml") == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: no space left on device writing {WHERE} (its traceback could not be written: "
    )
    assert "Traceback (most recent call last)" in err


def test_an_unreadable_file_of_the_users_stays_the_users_error(
    tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "models.yaml"
    error = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(spec))
    assert build_raising(monkeypatch, error)(spec) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {spec}: permission denied: the spec names this file and the build cannot read it"


def test_the_repository_and_the_cache_beside_the_spec_are_the_builds(
    tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for ours in (
        tmp_path / "model_repository.staging-3" / "m",
        tmp_path / ".tritonforge" / "cache" / "m" / "x",
    ):
        error = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(ours))
        assert build_raising(monkeypatch, error)(tmp_path / "models.yaml") == 1
        assert capsys.readouterr().err.startswith(
            f"error: permission denied on {ours}: see the traceback in "
        )


@pytest.mark.integration  # a tritonserver's start (refused before its process starts)
def test_serve_on_a_taken_port_names_the_port(
    tmp_path: Path, logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "repo").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert (
            main(["serve", "--repo", str(tmp_path / "repo"), "--http-port", str(port), "--openai-port", "0"])
            == 1
        )
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(
        f"error: address already in use: 127.0.0.1:{port} (tritonserver's http port): see the traceback in "
    )
