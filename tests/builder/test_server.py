"""The tritonserver launcher and ``tritonforge serve`` against the real server."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.cli.serve import is_loopback, ready_models
from builder.configs import python_config, read_config, write_config
from builder.errors import BuildError
from builder.python_models import copy_sources, model_sources, package
from builder.server import TritonServer, find_free_port, tritonserver_command
from builder.shared_memory import group_members
from builder.spec import PythonModelSpec
from tests.integration.fixtures.processes import alive

ROOT = Path(__file__).parents[2]
bundled = pytest.mark.skipif(shutil.which("tritonserver") is not None, reason="a system tritonserver is used")


def python_repo(root: Path, name: str = "pre") -> Path:
    """A repository with one real Python-backend model (the image preprocessor)."""
    pm = PythonModelSpec.model_validate(
        {
            "name": name,
            "path": "builder/python_models/image_preprocess",
            "inputs": [{"name": "IMAGE", "dtype": "STRING", "dims": [1]}],
            "outputs": [{"name": "PIXELS", "dtype": "FP32", "dims": [3, 224, 224]}],
            "max_batch_size": 2,
        }
    )
    write_config(python_config(pm, queue_policy=True), root / name)
    (root / name / "1").mkdir()
    copy_sources(model_sources(package("image_preprocess")), root / name / "1")
    return root


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a LISTEN socket on ``port`` (IPv4-mapped IPv6 shown as IPv4)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                found.add(str(_proc_address(addr)))
    return found


def _proc_address(hexaddr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hexaddr)
    # /proc prints each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw)
    v6 = ipaddress.IPv6Address(raw)
    return v6.ipv4_mapped or v6


def test_find_free_port_is_bindable() -> None:
    port = find_free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@bundled
def test_command_uses_this_python() -> None:
    cmd, env = tritonserver_command()
    assert Path(cmd[0]).name == "tritonserver" and os.access(cmd[0], os.X_OK)
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert libs[0] == sysconfig.get_config_var("LIBDIR"), "the stub must link this interpreter's libpython"
    assert Path(libs[1]).name == "nvidia_pytriton.libs" and Path(libs[1]).is_dir()
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    backend = Path(next(a for a in cmd if a.startswith("--backend-directory=")).split("=", 1)[1])
    files = {p.name for p in (backend / "python").iterdir()}
    assert files >= {"libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"}
    assert os.access(backend / "python" / "triton_python_backend_stub", os.X_OK)
    assert tritonserver_command()[0] == cmd, "the backend folder is assembled once and reused"


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


@pytest.mark.integration
def test_start_serve_stop(tmp_path: Path) -> None:
    server = TritonServer(python_repo(tmp_path / "repo"), log_path=tmp_path / "server.log")
    with server:
        pid = server.pid
        assert pid is not None and server.is_ready()
        ports = (server.http_port, server.grpc_port, server.metrics_port)
        assert len(set(ports)) == 3
        for port in ports:
            assert listening_addresses(port) == {"127.0.0.1"}, f"port {port} must bind loopback only"
        assert ready_models(server.http_url) == ["pre"]
        with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
            assert "nv_inference_count" in r.read().decode()
    assert not alive(pid)
    assert not server.is_ready()
    server.stop()  # a second stop is harmless
    assert "successfully unloaded 'pre'" in (tmp_path / "server.log").read_text()


SPAWNING_MODEL = """
import subprocess
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # As vLLM's engine does: a process of its own, left running when the stub exits.
        child = subprocess.Popen(["sleep", "600"], start_new_session=False)
        Path(args["model_repository"], "child.pid").write_text(str(child.pid))

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
"""


@pytest.mark.integration
def test_stop_leaves_no_process_of_the_server_behind(tmp_path: Path) -> None:
    """What a model started (vLLM's engine core, say) dies with the server, however it exits."""
    repo = python_repo(tmp_path / "repo", name="spawner")
    (repo / "spawner" / "1" / "model.py").write_text(SPAWNING_MODEL)
    server = TritonServer(repo, log_path=tmp_path / "server.log")
    with server:
        pgid = server.pid
        assert pgid is not None
        child = int((repo / "spawner" / "child.pid").read_text())
        assert alive(child)
        # A process group of its own, in the caller's session: the kernel's autogroup then
        # schedules the server beside its clients, not as one session against them.
        assert os.getpgid(child) == pgid and os.getsid(pgid) == os.getsid(0)
    deadline = time.monotonic() + 10
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILL is delivered asynchronously: poll for it, with a deadline
    assert group_members(pgid) == [] and not alive(child)


@pytest.mark.integration
def test_failed_start_raises_with_the_log_tail(tmp_path: Path) -> None:
    repo = python_repo(tmp_path / "repo")
    cfg = read_config(repo / "pre" / "config.pbtxt")
    cfg.dynamic_batching.preferred_batch_size.append(64)
    write_config(cfg, repo / "pre")
    server = TritonServer(repo, log_path=tmp_path / "server.log")
    with pytest.raises(BuildError, match="exited with status 1") as info:
        server.start(timeout=60)
    assert "preferred size must be <= max batch size" in str(info.value)
    assert server.pid is None


@pytest.mark.integration
def test_a_python_model_that_cannot_start_fails_fast(tmp_path: Path) -> None:
    """Triton itself waits forever here; the launcher reads the log and gives up at once."""
    repo = python_repo(tmp_path / "repo")
    (repo / "pre" / "1" / "model.py").unlink()
    server = TritonServer(repo, log_path=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises(BuildError, match="Python model file not found"):
        server.start(timeout=100)
    assert time.monotonic() - started < 60
    assert server.pid is None


@pytest.mark.integration
def test_explicit_mode_loads_only_named_models(tmp_path: Path) -> None:
    repo = python_repo(python_repo(tmp_path / "repo", "a"), "b")
    with TritonServer(repo, model_control="explicit", load_models=["b"]) as server:
        assert ready_models(server.http_url) == ["b"]
        assert server.log_path is not None and server.log_path.is_file()
    assert not server.log_path.exists(), "a temp log is removed after a clean stop"


@pytest.mark.integration
def test_repository_top_level_extras(tmp_path: Path) -> None:
    """A plain file at the top of a repository is ignored; a hidden folder is taken for a model."""
    repo = python_repo(tmp_path / "repo")
    (repo / "manifest.json").write_text("{}")
    with TritonServer(repo, model_control="explicit", load_models=["*"]) as server:
        assert ready_models(server.http_url) == ["pre"]
    (repo / ".tritonforge").mkdir()
    (repo / ".tritonforge" / "state.json").write_text("{}")
    with pytest.raises(BuildError, match=r"failed to load model '\.tritonforge'"):
        TritonServer(repo, log_path=tmp_path / "hidden.log").start(timeout=60)


SERVE = textwrap.dedent(
    """
    import argparse, sys
    from builder.cli import serve as serve_cli
    parser = argparse.ArgumentParser()
    serve_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.func(args))
    """
)


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.integration
def test_serve_cli_runs_until_sigterm(tmp_path: Path) -> None:
    ports = [str(find_free_port()) for _ in range(4)]
    flags = ["--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2]]
    proc = serve("--repo", str(python_repo(tmp_path / "repo")), *flags, "--openai-port", ports[3])
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("Ctrl-C"):
                break
        out = "\n".join(lines)
        assert f"http://127.0.0.1:{ports[0]}" in out and f"127.0.0.1:{ports[1]}" in out
        assert f"http://127.0.0.1:{ports[2]}/metrics" in out
        assert "ready    pre" in out
        assert urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/v2/health/ready", timeout=5).status == 200
        assert f"OpenAI   http://127.0.0.1:{ports[3]}/v1" in out
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[3]}/v1/models", timeout=10) as r:
            assert json.load(r) == {"object": "list", "data": []}  # no LLM in this repository
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        log = next(line.split()[-1] for line in lines if line.startswith("log"))
        assert "successfully unloaded 'pre'" in Path(log).read_text()
        Path(log).unlink()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert listening_addresses(int(ports[0])) == set(), "the server stopped with the command"
    assert listening_addresses(int(ports[3])) == set(), "the OpenAI endpoint stopped with it"


def test_serve_cli_warns_before_binding_beyond_loopback(tmp_path: Path) -> None:
    proc = serve("--repo", str(tmp_path / "missing"), "--host", "0.0.0.0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "warning: binding to 0.0.0.0 exposes" in err
    assert "no such model repository" in err


@pytest.mark.integration
def test_restart_after_the_process_died_keeps_the_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = TritonServer(python_repo(tmp_path / "repo"), log_path=log)
    with server:
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.is_running()
        size = log.stat().st_size
        server.restart()
        assert server.is_ready() and server.pid != first
        assert log.stat().st_size > size  # appended to, the first run's lines kept


def test_extra_environment_reaches_the_server_command(tmp_path: Path) -> None:
    server = TritonServer(tmp_path, env={"VLLM_CPU_OMP_THREADS_BIND": "0-1"})
    _, env = server.command()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and "PATH" in env


@contextlib.contextmanager
def stand_in_endpoint() -> Iterator[int]:
    """Not Triton: a loopback HTTP server answering 200 to every GET, standing in for one of
    Triton's endpoints to check what the launcher waits for."""

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=stand_in.serve_forever, daemon=True)
    thread.start()
    try:
        yield stand_in.server_address[1]
    finally:
        stand_in.shutdown()
        stand_in.server_close()


def test_a_start_waits_for_the_metrics_endpoint_as_well(tmp_path: Path) -> None:
    """Triton opens its metrics port after HTTP: ready alone is not up, unless metrics are off."""
    with stand_in_endpoint() as http_port:
        server = TritonServer(tmp_path)
        server.http_port, server.metrics_port = http_port, find_free_port()  # nothing listens there
        assert server.is_ready() and not server.endpoints_up()
        with stand_in_endpoint() as metrics_port:
            server.metrics_port = metrics_port
            assert server.endpoints_up()
        off = TritonServer(tmp_path, extra_args=["--allow-metrics=false"])
        off.http_port, off.metrics_port = http_port, find_free_port()
        assert off.endpoints_up()


@pytest.mark.integration
def test_a_server_stop_kills_leaves_no_shared_memory(tmp_path: Path) -> None:
    """A server that must be killed (no time to exit) leaves its stub's region in /dev/shm, which
    stop() removes."""
    server = TritonServer(python_repo(tmp_path / "repo"), log_path=tmp_path / "server.log")
    server.start()
    maps = Path(f"/proc/{server.pid}/maps").read_text()
    marker = "/dev/shm/triton_python_backend_shm_region_"
    regions = {Path(line.split(" ")[-1]) for line in maps.splitlines() if marker in line}
    assert regions, "the server maps its Python-backend regions"
    server.stop(timeout=0)  # SIGTERM, then SIGKILL at once
    assert sorted(str(r) for r in regions if r.exists()) == []


def _aborting_first(marker: Path, always: bool = False) -> Any:
    """TritonServer.command wrapped in a shell that dies by SIGABRT before exec: the first time
    (``marker`` then exists), or every time; it leaves a child in its group, as a stub would be,
    whose pid it writes to ``marker``."""
    real = TritonServer.command
    test = "true" if always else f"[ ! -e {marker} ]"

    def command(self: TritonServer) -> tuple[list[str], dict[str, str]]:
        cmd, env = real(self)
        script = f'if {test}; then sleep 600 & echo $! > {marker}; kill -ABRT $$; fi; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *cmd], env

    return command


@pytest.mark.integration
def test_a_server_that_dies_by_a_signal_as_it_starts_is_started_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = python_repo(tmp_path / "repo")
    monkeypatch.setattr(TritonServer, "command", _aborting_first(tmp_path / "aborted"))
    with TritonServer(repo, log_path=tmp_path / "server.log") as server:
        assert server.is_ready()
        assert not alive(int((tmp_path / "aborted").read_text()))  # what the dead one left, killed
    log = (tmp_path / "server.log").read_text()
    assert "tritonserver died by SIGABRT during start-up; starting it once more" in log
    assert log.count("died by SIGABRT") == 1


@pytest.mark.integration  # its command is tritonserver's, though it never runs
def test_a_server_that_dies_by_a_signal_at_every_start_fails_after_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from builder.server import StartupAbort

    monkeypatch.setattr(TritonServer, "command", _aborting_first(tmp_path / "aborted", always=True))
    server = TritonServer(tmp_path, log_path=tmp_path / "server.log")
    with pytest.raises(StartupAbort, match="tritonserver died by SIGABRT during start-up"):
        server.start(timeout=30)
    assert not alive(int((tmp_path / "aborted").read_text()))
    assert (tmp_path / "server.log").read_text().count("starting it once more") == 1
    assert server.pid is None
