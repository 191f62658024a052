"""Run the endpoint with uvicorn on its own thread (beside a tritonserver), or alone from the shell.

``python -m openai_frontend --triton 127.0.0.1:8001`` serves it against a running server
(the container's entrypoint does so); ``tritonforge serve`` runs it with the server it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from types import TracebackType

import uvicorn

from . import API_KEY_ENV, DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT
from .app import Settings, create_app
from .engine import Engine
from .triton import TritonEngine


class OpenAIServer:
    """The endpoint over ``engine`` on ``host:port`` (``port`` 0: one the OS picks; read ``.port``
    once started)."""

    def __init__(
        self, settings: Settings, engine: Engine, host: str = "127.0.0.1", port: int = DEFAULT_PORT
    ) -> None:
        config = uvicorn.Config(
            create_app(settings, engine), host=host, port=port, log_level="warning", lifespan="on",
            timeout_graceful_shutdown=5,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="openai-endpoint", daemon=True)
        self.host, self.port = host, port

    def _run(self) -> None:
        with contextlib.suppress(SystemExit):  # uvicorn's way to say it could not start (logged)
            self._server.run()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, timeout: float = 30) -> None:
        """Listen; a port taken (or refused) raises the bind's own ``OSError``, its errno kept
        (uvicorn would log it and stop)."""
        self._check_port()
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():  # uvicorn logs why (e.g. the port is taken) and returns
                raise OSError(f"the OpenAI endpoint could not listen on {self.host}:{self.port}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the OpenAI endpoint did not start within {timeout:.0f} s")
            time.sleep(0.05)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])

    def _check_port(self) -> None:
        if self.port == 0:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                probe.bind((self.host, self.port))
            except OSError as exc:
                message = f"the OpenAI endpoint could not listen on {self.host}:{self.port}: {exc.strerror}"
                raise OSError(exc.errno, message) from exc

    def is_running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def api_key(flag: str | None) -> str | None:
    """The key from the flag, else from the environment; empty means none."""
    return (flag if flag is not None else os.environ.get(API_KEY_ENV, "")) or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m openai_frontend", description=__doc__)
    p.add_argument("--triton", default="127.0.0.1:8001", help="tritonserver's gRPC endpoint (host:port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--api-key", default=None, help=f"default: ${API_KEY_ENV}; none: no key asked for")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    args = p.parse_args(argv)
    if args.max_body_bytes < 1:
        print(f"error: --max-body-bytes must be positive, got {args.max_body_bytes}", file=sys.stderr)
        return 2
    app = create_app(Settings(api_key(args.api_key), args.max_body_bytes), TritonEngine(args.triton))
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
    uvicorn.Server(config).run()  # on the main thread: uvicorn handles SIGTERM and SIGINT itself
    return 0
