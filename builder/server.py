"""Start and stop a real ``tritonserver`` on a model repository.

In the official container ``tritonserver`` is on PATH. Elsewhere the binary
bundled with nvidia-pytriton is used; it needs a Python-backend folder laid
out as Triton expects (assembled once under a cache folder) and the running
interpreter's own libpython first on LD_LIBRARY_PATH (a different patch
release of libpython breaks the stub at run time).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from builder import shared_memory
from builder.errors import BuildError
from builder.failures import environment_fault

STUB = "triton_python_backend_stub"
BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
# Log lines after which the server never becomes ready but does not exit either.
HANGS = ("Failed to preinitialize Python stub",)


# The signals of a start-up death that is tried once more: an abort or a crash. SIGKILL (the
# kernel's out-of-memory killer, an operator) would only come again.
RETRIED_SIGNALS = (signal.SIGABRT, signal.SIGSEGV)


class StartupAbort(BuildError):
    """tritonserver died by SIGABRT or SIGSEGV before it was ready: no request had reached it.
    Under load, tritonserver 2.51 has aborted so now and then as it starts (gRPC's poller finding
    its epoll descriptor closed, a boost lock error), and the same start then succeeded; a model
    that crashes the server as it loads aborts both times."""

    def __init__(self, signum: int, log_tail: str) -> None:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        self.headline = f"tritonserver died by {name} during start-up"
        super().__init__(f"{self.headline}:\n{log_tail}")


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise the host's refusal (an ``EnvironmentFault``: ``address already in use: <host>:<port>
    (<what>)``) when ``port`` is taken, before a server fails on it in a log of its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            fault = environment_fault(exc, where=f"{host}:{port} ({what})")
            if fault is not None:
                raise fault from exc  # else (an address not of this host) the server says why


def _answers(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def tritonserver_command() -> tuple[list[str], dict[str, str]]:
    """The server binary and the environment to start it with."""
    env = dict(os.environ)
    on_path = shutil.which("tritonserver")
    if on_path:
        return [on_path], env
    root = _pytriton_root()
    bin_dir = Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")]).rstrip(os.pathsep)
    libs = [str(sysconfig.get_config_var("LIBDIR")), str(root.parent / "nvidia_pytriton.libs")]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    binary = root / "tritonserver" / "bin" / "tritonserver"
    return [str(binary), f"--backend-directory={python_backend_dir(root)}"], env


def _pytriton_root() -> Path:
    try:
        import pytriton
    except ImportError:
        raise BuildError("no tritonserver on PATH and nvidia-pytriton is not installed") from None
    return Path(pytriton.__file__).parent


def python_backend_dir(root: Path | None = None) -> Path:
    """``<cache>/backends`` holding ``python/`` with the stub for the running Python."""
    root = root or _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "tritonserver" / "python_backend_stubs" / version / STUB
    if not stub.is_file():
        raise BuildError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonforge"
    key = f"py{version}-{stub.stat().st_size}-{int(stub.stat().st_mtime)}"
    target = cache / "backends" / key
    if (target / "python" / STUB).is_file():
        return target
    # Assemble in a private folder and rename: concurrent starts never see half a backend.
    cache.joinpath("backends").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache / "backends"))
    (staging / "python").mkdir()
    for name in BACKEND_FILES:
        shutil.copy2(root / "tritonserver" / "backends" / "python" / name, staging / "python" / name)
    shutil.copy2(stub, staging / "python" / STUB)
    (staging / "python" / STUB).chmod(0o755)
    try:
        staging.rename(target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up here, not in the forked child: no dlopen between fork and exec.
_PRCTL = _libc_prctl()


def _own_group_dying_with_parent() -> None:
    """In the child: a process group of its own, which ``stop`` kills whole (the Python-backend
    stubs and the engine processes they start), and SIGTERM when the parent dies, so no server
    outlives a killed test run.

    A group, not a session of its own: Linux's autogroup (on in most distributions' kernels) shares
    the CPU between sessions first, so a server in its own session got one session's share against
    its clients. On two cores under aiperf, the vLLM engine's spinning wait then took the stub's
    and the worker's time inside that share: TTFT p50 at one stream 122-132 ms against vLLM's own
    server's 88-91 alternated with it, and 100 ms with autogroup off."""
    os.setpgid(0, 0)
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class TritonServer:
    """A tritonserver process bound to ``host``; ``None`` ports are picked free."""

    def __init__(
        self,
        repo: Path,
        *,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_control: str = "none",
        load_models: list[str] | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        exit_timeout_s: int = 30,
    ) -> None:
        if model_control not in ("none", "explicit", "poll"):
            raise ValueError(f"model_control '{model_control}': choose none, explicit or poll")
        self.repo = Path(repo)
        self.host = host
        self._ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.model_control = model_control
        self.load_models = list(load_models or [])
        self.extra_args = list(extra_args)
        self.env = dict(env or {})  # added to the server's environment (e.g. OMP / vLLM settings)
        # How long Triton waits on SIGTERM for in-flight requests (live sequences count) to finish.
        self.exit_timeout_s = exit_timeout_s
        self._log_given = log_path
        self.log_path: Path | None = log_path
        self._restarted = False
        self._proc: subprocess.Popen[bytes] | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def _client_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._client_host}:{self.metrics_port}/metrics"

    def command(self) -> tuple[list[str], dict[str, str]]:
        cmd, env = tritonserver_command()
        cmd += [
            f"--model-repository={self.repo.resolve()}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            f"--model-control-mode={self.model_control}",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={self.exit_timeout_s}",
        ]
        cmd += [f"--load-model={m}" for m in self.load_models]
        return cmd + self.extra_args, {**env, **self.env}

    def start(self, timeout: float = 120) -> None:
        """Start and wait for /v2/health/ready and the metrics endpoint (``endpoints_up``); retry
        with new ports if picked ones were taken, and once where the process died by a signal
        before it was ready (``StartupAbort``)."""
        attempts = 3 if None in self._ports.values() else 1
        attempt, aborted = 0, False
        while True:
            try:
                self._start_once(timeout)
                return
            except StartupAbort as exc:
                if aborted:
                    raise
                aborted = True
                self._note_restart(exc)
            except BuildError as exc:
                attempt += 1
                if attempt == attempts or "already in use" not in str(exc).lower():
                    raise

    def _note_restart(self, exc: StartupAbort) -> None:
        """Say, in the log and on stderr, that the start is tried again; the log is appended to."""
        line = f"tritonforge: {exc.headline}; starting it once more"
        print(line, file=sys.stderr, flush=True)
        assert self.log_path is not None
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"\n--- {line} ---\n")
        self._restarted = True

    def _start_once(self, timeout: float) -> None:
        if self._proc is not None:
            raise RuntimeError("server already started")
        for key, port in self._ports.items():
            if port:  # a port the caller named: taken, it is the host's fault, said before starting
                check_port_free(self.host, port, f"tritonserver's {key} port")
            setattr(self, f"{key}_port", port or find_free_port(self._client_host))
        if self._log_given is None and not (self._restarted and self.log_path is not None):
            fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        assert self.log_path is not None
        cmd, env = self.command()
        with open(self.log_path, "ab" if self._restarted else "wb") as log:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=_own_group_dying_with_parent,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code, pid = self._proc.returncode, self._proc.pid
                self._proc = None
                self._end_group(pid)
                if -code in RETRIED_SIGNALS:
                    raise StartupAbort(-code, self.log_tail())
                raise BuildError(
                    f"tritonserver exited with status {code} during start-up:\n{self.log_tail()}"
                )
            if self.endpoints_up():
                return
            hang = self._hang_marker()
            if hang:
                self.stop(timeout=5)
                raise BuildError(f"tritonserver cannot start ({hang}):\n{self.log_tail()}")
            time.sleep(0.2)
        self.stop()
        raise BuildError(f"tritonserver was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def _hang_marker(self) -> str | None:
        assert self.log_path is not None
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            return next((m for m in HANGS if m in text), None)
        return None

    def restart(self, timeout: float = 120) -> None:
        """Start again after the process died; the log is appended to, not replaced."""
        self.stop()
        self._restarted = True
        self.start(timeout)

    def is_ready(self) -> bool:
        return _answers(f"{self.http_url}/v2/health/ready")

    def endpoints_up(self) -> bool:
        """Ready, and the metrics endpoint answering unless metrics are off. Triton opens that
        one after HTTP: a start that waited for ready alone handed out a metrics URL that refused
        connections for some tens of milliseconds."""
        metrics_off = "--allow-metrics=false" in self.extra_args
        return self.is_ready() and (metrics_off or _answers(self.metrics_url))

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (Triton unloads models and exits), then SIGKILL after ``timeout`` (default: the
        server's own exit timeout and a few seconds to unload)."""
        timeout = self.exit_timeout_s + 5 if timeout is None else timeout
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        shm = shared_memory.mapped_names(shared_memory.group_members(proc.pid))
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        # The Python-backend stubs and what they started (vLLM's engine processes) share the
        # server's process group: whatever is left of it once the server is gone is an orphan.
        self._end_group(proc.pid, shm)
        if code is None:
            code = proc.wait(10)
        if code == 0 and self._log_given is None and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)  # our temp log; kept when something went wrong

    @staticmethod
    def _end_group(pgid: int, shm: set[str] | None = None) -> None:
        """What is left of a server's process group (the stubs, the engines they started) killed
        and waited for until gone (a SIGKILL lands a moment after it is sent); then what they
        mapped in /dev/shm (``shm``, else read now) removed: SIGKILL leaves Triton's and vLLM's
        files, a clean exit none."""
        if shm is None:
            shm = shared_memory.mapped_names(shared_memory.group_members(pgid))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while shared_memory.group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if shm:
            shared_memory.remove_orphaned(shm)

    def log_tail(self, lines: int = 25) -> str:
        """The server's error lines, then the end of its log (status tables left out)."""
        if self.log_path is None or not self.log_path.is_file():
            return "(no server log)"
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        text = [line for line in text if line.strip() and not line.startswith(("+", "|"))]
        errors = [line for line in text if line[:1] == "E" and line[1:2].isdigit()]
        errors = [line for line in errors if "CudaDriverHelper" not in line]  # every CPU-only start says so
        tail = [line for line in text[-lines:] if line not in errors]
        return "\n".join(errors[-lines:] + tail)

    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
