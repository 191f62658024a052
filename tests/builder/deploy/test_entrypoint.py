"""deploy/entrypoint.sh: engines only when they can be built, exec into tritonserver, safe flags.

The fakes stand in for tritonforge, tritonserver and nvidia-smi; the last test runs the
real tritonserver (the one nvidia-pytriton ships) with the entrypoint's flags.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"

FAKE_SERVER = """#!/bin/bash
echo "pid=$$" > "$FAKE_LOG/server"
printf '%s\\n' "$@" >> "$FAKE_LOG/server"
"""
FAKE_FORGE = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/forge"
"""


def fake_bin(tmp_path: Path, gpu: bool) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "tritonserver": FAKE_SERVER,
        "tritonforge": FAKE_FORGE,
        "nvidia-smi": f"#!/bin/bash\nexit {0 if gpu else 1}\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run(tmp_path: Path, gpu: bool = True, args: tuple[str, ...] = (), **env: str) -> tuple[int, list[str]]:
    """Run the entrypoint with the fakes; return the server's pid and arguments."""
    bin_dir = fake_bin(tmp_path, gpu)
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(tmp_path), **env}
    proc = subprocess.Popen(["bash", str(ENTRYPOINT), *args], env=full_env, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    pid_line, *server_args = (tmp_path / "server").read_text().splitlines()
    assert int(pid_line.removeprefix("pid=")) == proc.pid, "tritonserver must replace the shell (exec)"
    return proc.pid, server_args


def forge_args(tmp_path: Path) -> list[str] | None:
    log = tmp_path / "forge"
    return log.read_text().splitlines() if log.exists() else None


def test_builds_stale_engines_for_the_gpu_then_serves(tmp_path: Path) -> None:
    _, args = run(tmp_path, TRITONFORGE_REPOSITORY="/models", TRITONFORGE_SPEC="/spec.yaml")
    assert forge_args(tmp_path) == [
        "engines",
        "--if-stale",
        "--require-engines",  # a plan that cannot be built stops the start: its model would not load
        "--spec",
        "/spec.yaml",
        "--repo",
        "/models",
    ]
    assert "--model-repository=/models" in args


@pytest.mark.parametrize(
    ("gpu", "env"),
    [
        (True, {"TRITONFORGE_REPOSITORY": "s3://bucket/repo"}),
        (True, {"TRITONFORGE_SKIP_ENGINES": "1"}),
        (False, {"TRITONFORGE_SKIP_ENGINES": "1"}),
    ],
)
def test_no_engine_build_for_remote_repos_or_when_skipped(
    tmp_path: Path, gpu: bool, env: dict[str, str]
) -> None:
    run(tmp_path, gpu=gpu, **env)
    assert forge_args(tmp_path) is None


def refused(tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(tmp_path), **env}
    result = subprocess.run(
        ["bash", str(ENTRYPOINT)], env=full_env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode != 0 and not (tmp_path / "server").exists(), result.stderr
    return result


@pytest.mark.parametrize("env", [{}, {"TRITONFORGE_REPOSITORY": "s3://bucket/repo"}])
def test_without_a_gpu_it_refuses_to_start_and_says_why(tmp_path: Path, env: dict[str, str]) -> None:
    result = refused(tmp_path, fake_bin(tmp_path, gpu=False), **env)
    assert forge_args(tmp_path) is None
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert line.startswith("entrypoint: error: no GPU visible") and "cannot serve here" in line
    assert "--gpus" in line and "--target cpu" in line
    assert "fallback serves" not in line


def test_safe_defaults_and_extra_arguments_last(tmp_path: Path) -> None:
    _, args = run(tmp_path, args=("--http-port=8080",), TRITON_ADMIN_KEY="k3y")
    assert "--model-control-mode=none" in args and "--allow-metrics=true" in args
    restricted = "model-repository,shared-memory,trace,logging:triton-admin-key=k3y"
    assert f"--http-restricted-api={restricted}" in args
    assert f"--grpc-restricted-protocol={restricted}" in args
    assert args[-1] == "--http-port=8080"


def test_without_a_key_the_restricted_endpoints_get_an_unguessable_one(tmp_path: Path) -> None:
    keys = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        _, args = run(tmp_path / str(i))
        (api,) = [a for a in args if a.startswith("--http-restricted-api=")]
        keys.append(api.rsplit("=", 1)[1])
    assert all(re.fullmatch(r"[0-9a-f]{48}", k) for k in keys) and keys[0] != keys[1]


def test_a_failed_engine_build_stops_the_container(tmp_path: Path) -> None:
    bin_dir = fake_bin(tmp_path, gpu=True)
    (bin_dir / "tritonforge").write_text(
        "#!/bin/bash\necho 'error: engines: tiny int8: failed' >&2\nexit 3\n"
    )
    result = refused(tmp_path, bin_dir)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines[-2:][0] == "error: engines: tiny int8: failed"  # tritonforge's own message, then why
    assert lines[-1].startswith("entrypoint: error: not starting tritonserver: a TensorRT plan could not")


# The real server: the flags parse, the restrictions hold, SIGTERM reaches it.


def real_tritonserver() -> Path | None:
    found = importlib.util.find_spec("pytriton")  # located, not imported: its protos clash with kserve's
    if found is None or not found.submodule_search_locations:
        return None
    binary = Path(found.submodule_search_locations[0]) / "tritonserver" / "bin" / "tritonserver"
    return binary if binary.exists() else None


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def status(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening yet
        return 0


@pytest.mark.integration
def test_real_tritonserver_accepts_the_flags_and_enforces_them(tmp_path: Path) -> None:
    binary = real_tritonserver()
    if binary is None:
        pytest.skip("nvidia-pytriton's tritonserver is not installed")
    libs = binary.parents[3] / "nvidia_pytriton.libs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = f'#!/bin/bash\nexport LD_LIBRARY_PATH={libs}\nexec {binary} "$@"\n'
    (bin_dir / "tritonserver").write_text(wrapper)
    (bin_dir / "tritonserver").chmod(0o755)
    (tmp_path / "repo").mkdir()
    http, grpc, metrics = free_ports(3)
    args = [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    args += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TRITONFORGE_REPOSITORY": str(tmp_path / "repo"),
        "TRITONFORGE_SKIP_ENGINES": "1",
        "TRITON_ADMIN_KEY": "s3cret",
    }
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and status(f"{base}/v2/health/ready") != 200:
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()[1]
        assert b"tritonserver" in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert status(f"{base}/v2/repository/index", "POST") == 403
        key = {"triton-admin-key": "s3cret"}
        assert status(f"{base}/v2/repository/index", "POST", key) == 200
        assert status(f"{base}/v2/repository/models/any/load", "POST", key) != 200  # model control off
        assert status(f"http://127.0.0.1:{metrics}/metrics") == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


FAKE_PYTHON = """#!/bin/bash
[[ "$1" == -c ]] && exit 0
printf '%s\\n' "$@" > "$FAKE_LOG/openai.tmp" && mv "$FAKE_LOG/openai.tmp" "$FAKE_LOG/openai"
"""


@pytest.mark.parametrize("port", ["", "9100", "0"])
def test_the_openai_endpoint_starts_beside_tritonserver_unless_off(tmp_path: Path, port: str) -> None:
    bin_dir = fake_bin(tmp_path, gpu=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(tmp_path), "TRITONFORGE_OPENAI_PORT": port}
    proc = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "server").is_file()  # tritonserver still runs, in the shell's place
    if port == "0":
        assert not (tmp_path / "openai").exists() and "OpenAI" not in proc.stderr
        return
    deadline = time.monotonic() + 10
    while not (tmp_path / "openai").exists():  # started in the background: wait for its record
        assert time.monotonic() < deadline, "the OpenAI endpoint was not started"
        time.sleep(0.05)
    args = (tmp_path / "openai").read_text().split()
    assert args == ["-m", "openai_frontend", "--triton", "127.0.0.1:8001", "--host", "0.0.0.0",
                    "--port", port or "9000"]  # fmt: skip
    assert "TRITONFORGE_OPENAI_API_KEY is not set" in proc.stderr
