"""vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``), started on a free
port and held until it is healthy: what the benchmarks and the side-by-side tests compare against."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from builder.server import find_free_port


@dataclass(frozen=True)
class VLLMServer:
    url: str  # host:port of its HTTP endpoint
    pid: int  # its API server process (vLLM's engine core runs under it)

    @property
    def http_url(self) -> str:
        return f"http://{self.url}"


class NotUp(RuntimeError):
    """vLLM's server exited or was not healthy in time; the message ends with its log's tail."""


@contextlib.contextmanager
def vllm_openai_server(args: list[str], log_path: Path, timeout: float) -> Iterator[VLLMServer]:
    """vLLM's server with ``args`` (``--model`` and the engine settings) on a free port, its output
    in ``log_path``, yielded once ``/health`` answers; terminated on leaving."""
    port = find_free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args,
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    url = f"127.0.0.1:{port}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(proc, url, log_path, timeout)
            yield VLLMServer(url, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NotUp(f"vLLM's server exited: {log_path.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(f"http://{url}/health", timeout=2).status == 200:
                return
        time.sleep(1)  # a poll of its health, not an ordering of events
    raise NotUp(f"vLLM's server was not up in {timeout:g} s: {log_path.read_text()[-3000:]}")
