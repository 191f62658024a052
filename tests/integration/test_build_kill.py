"""A build killed at any stage leaves the published repository intact and loadable.

`tritonforge build` runs as a subprocess on a copy of the tiny project; it is sent SIGKILL the moment
its progress log (stderr) announces export, int8 quantization and verification. Each time the
published repository must be byte-for-byte what it was, and afterwards still load in the real server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.reliability import record
from builder.server import TritonServer
from clients import Client
from tests.conftest import tree_digest
from tests.integration.fixtures.reliability_repo import repo_digest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
KILL_AT = ("[tiny] export ...", "[tiny] int8 ...", "[tiny] verify-fp32 ...")
STAGE_TIMEOUT = 300.0


def build_command(project: Path, cache: Path) -> list[str]:
    return [
        sys.executable, "-m", "builder.cli", "build", "--spec", str(project / "models.yaml"),
        "--repo", str(project / "model_repository"), "--target", "local", "--cache", str(cache),
    ]  # fmt: skip


def _lowest_priority() -> None:
    os.nice(19)  # the reader wakes first, so the kill lands while the announced stage runs


def build_killed_at(project: Path, cache: Path, marker: str) -> list[str]:
    """Run the build until stderr shows `marker`, SIGKILL it, return every line it wrote."""
    proc = subprocess.Popen(
        build_command(project, cache), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, preexec_fn=_lowest_priority,
    )  # fmt: skip
    timer = threading.Timer(STAGE_TIMEOUT, proc.kill)  # a build that never gets there is stopped too
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith(marker):
                proc.send_signal(signal.SIGKILL)
                break
        lines += [line.rstrip("\n") for line in proc.stderr]  # what it wrote before it died
        assert proc.wait(30) == -signal.SIGKILL, f"the build ended before '{marker}':\n" + "\n".join(lines)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines


def larger_data(project: Path) -> None:
    """More samples than the project's own, so quantization and verification take long enough to be
    killed in the middle (the tiny defaults finish them in milliseconds)."""
    rng = np.random.default_rng(7)
    np.savez(project / "data" / "calib.npz", x=rng.normal(size=(4096, 16)).astype(np.float32))
    np.savez(project / "data" / "eval.npz", x=rng.normal(size=(16384, 16)).astype(np.float32))


def test_killed_builds_leave_the_repository_intact(tiny_project: Path, tmp_path: Path) -> None:
    repo = tiny_project / "model_repository"
    first = subprocess.run(
        build_command(tiny_project, tmp_path / "cache-first"), cwd=ROOT, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    digest = tree_digest(repo)
    config = (repo / "tiny" / "config.pbtxt").read_text()

    # The next build would publish something else (other preferred sizes) and starts from an empty cache.
    larger_data(tiny_project)
    spec_path = tiny_project / "models.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["models"][0]["batching"]["preferred_batch_sizes"] = [2, 8]
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    cache = tmp_path / "cache-killed"

    landed = {}
    for marker in KILL_AT:
        lines = build_killed_at(tiny_project, cache, marker)
        stage = marker.removeprefix("[tiny] ").removesuffix(" ...")
        landed[stage] = not any(line.startswith(f"[tiny] {stage}: done") for line in lines)
        assert not any(line.startswith("publish:") for line in lines)
        assert tree_digest(repo) == digest, f"killed at {stage}: the published repository changed"
        assert (repo / "tiny" / "config.pbtxt").read_text() == config
    assert all(landed.values()), f"a kill came after its stage had finished: {landed}"
    record("build_kill", {"killed_inside_stage": landed, "repository_unchanged": True})

    server = TritonServer(repo, log_path=tmp_path / "server.log")
    with server, Client(server.grpc_url, timeout=30) as client:
        models = sorted(p.parent.name for p in repo.glob("*/config.pbtxt"))
        assert "tiny" in models
        for model in models:  # the served variant and every other one that passed verification
            y = client.infer(model, {"x": np.ones((2, 16), np.float32)})["y"]
            assert y.shape == (2, 10) and np.isfinite(y).all()
    assert repo_digest(repo) == digest  # serving changed nothing but Python's own __pycache__

    # The stage cache the killed builds left behind is sound: the next build finishes and publishes.
    start = time.monotonic()
    done = subprocess.run(build_command(tiny_project, cache), cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "publish:" in done.stderr and time.monotonic() - start < STAGE_TIMEOUT
    assert "preferred_batch_size: 2\n" in (repo / "tiny" / "config.pbtxt").read_text()
    assert not list(tiny_project.glob("model_repository.staging-*"))
