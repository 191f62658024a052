"""``tritonforge serve``: run tritonserver on a built repository until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from builder.errors import BuildError, EnvironmentFault
from builder.failures import environment_fault
from builder.server import TritonServer
from openai_frontend import API_KEY_ENV, DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT

if TYPE_CHECKING:
    from openai_frontend.server import OpenAIServer


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="serve a model repository with a real tritonserver")
    p.add_argument("--repo", type=Path, default=Path("model_repository"), help="the model repository")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind http, grpc and metrics to (default loopback)"
    )
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--model-control", choices=("none", "explicit"), default="none")
    p.add_argument(
        "--openai-port", type=int, default=DEFAULT_PORT,
        help=f"OpenAI-compatible endpoint for the repository's LLMs (default {DEFAULT_PORT}; 0: off)",
    )  # fmt: skip
    p.add_argument(
        "--openai-api-key", default=None,
        help=f"key the OpenAI endpoint asks for (default: ${API_KEY_ENV}; unset or empty: none)",
    )  # fmt: skip
    p.add_argument("--openai-max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    p.set_defaults(func=run)
    return p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except (OSError, ValueError):
            return False


def ready_models(http_url: str) -> list[str]:
    """Names of the models the server reports READY (the repository index)."""
    req = urllib.request.Request(f"{http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        index = json.load(r)
    return sorted(m["name"] for m in index if m.get("state") == "READY")


def _log_file() -> Path:
    fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
    os.close(fd)
    return Path(name)


def run(args: argparse.Namespace) -> int:
    if not is_loopback(args.host):
        print(
            f"warning: binding to {args.host} exposes inference, metrics"
            + (" and model load/unload" if args.model_control == "explicit" else "")
            + " to the network, without authentication",
            file=sys.stderr,
        )
    if not 0 <= args.openai_port <= 65535 or args.openai_max_body_bytes < 1:
        print("error: --openai-port must be 0-65535 and --openai-max-body-bytes positive", file=sys.stderr)
        return 2
    if not args.repo.is_dir():
        print(f"error: {args.repo}: no such model repository (run the build first)", file=sys.stderr)
        return 2
    server = TritonServer(
        args.repo,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_control=args.model_control,
        load_models=["*"] if args.model_control == "explicit" else None,
        log_path=_log_file(),  # kept after the server stops, for the user to read
    )
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _serve(server, stop, args)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


START_TIMEOUT_S = 600  # an LLM in the repository: vLLM's engine takes from 20 s to minutes to start


def _serve(server: TritonServer, stop: threading.Event, args: argparse.Namespace) -> int:
    try:
        server.start(timeout=START_TIMEOUT_S)
    except EnvironmentFault:
        raise  # a port taken: the command line names it and keeps its traceback
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as stack:
        openai = _openai(server, args)
        if openai is not None:
            try:
                stack.enter_context(openai)
            except (OSError, TimeoutError) as exc:
                fault = environment_fault(
                    exc, where=f"{args.host}:{args.openai_port} (the OpenAI endpoint's port)"
                )
                if fault is not None:
                    raise fault from exc
                print(f"error: {exc}", file=sys.stderr)
                return 1
        return _wait(server, stop, openai)


def _openai(server: TritonServer, args: argparse.Namespace) -> OpenAIServer | None:
    if args.openai_port == 0:
        return None
    try:  # FastAPI, uvicorn and the SDK types: requirements/llm.txt, only needed when on
        from openai_frontend.app import Settings
        from openai_frontend.server import OpenAIServer, api_key
        from openai_frontend.triton import TritonEngine
    except ImportError as exc:
        print(f"warning: no OpenAI endpoint ({exc}; install requirements/llm.txt)", file=sys.stderr)
        return None

    settings = Settings(api_key(args.openai_api_key), args.openai_max_body_bytes)
    if settings.api_key is None and not is_loopback(args.host):
        print(f"warning: the OpenAI endpoint on {args.host} asks for no key (set {API_KEY_ENV})",
              file=sys.stderr)  # fmt: skip
    return OpenAIServer(settings, TritonEngine(server.grpc_url), host=args.host, port=args.openai_port)


def _wait(server: TritonServer, stop: threading.Event, openai: OpenAIServer | None) -> int:
    print(f"HTTP     {server.http_url}")
    print(f"gRPC     {server.grpc_url}")
    print(f"metrics  {server.metrics_url}")
    if openai is not None:
        print(f"OpenAI   {openai.url}")
    print(f"ready    {', '.join(ready_models(server.http_url)) or '(none)'}")
    print(f"log      {server.log_path}")
    print("Ctrl-C to stop", flush=True)
    while not stop.wait(0.5):
        if not server.is_running():
            print(f"error: tritonserver exited:\n{server.log_tail()}", file=sys.stderr)
            return 1
        if openai is not None and not openai.is_running():
            print("error: the OpenAI endpoint stopped", file=sys.stderr)
            return 1
    print("stopping", flush=True)
    return 0
