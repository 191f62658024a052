"""``tritonforge serve``: run tritonserver on a built repository until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
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

from builder.errors import BuildError
from builder.server import TritonServer


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
        return _serve(server, stop)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


START_TIMEOUT_S = 600  # an LLM in the repository: vLLM's engine takes from 20 s to minutes to start


def _serve(server: TritonServer, stop: threading.Event) -> int:
    try:
        server.start(timeout=START_TIMEOUT_S)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"HTTP     {server.http_url}")
    print(f"gRPC     {server.grpc_url}")
    print(f"metrics  {server.metrics_url}")
    print(f"ready    {', '.join(ready_models(server.http_url)) or '(none)'}")
    print(f"log      {server.log_path}")
    print("Ctrl-C to stop", flush=True)
    while not stop.wait(0.5):
        if not server.is_running():
            print(f"error: tritonserver exited:\n{server.log_tail()}", file=sys.stderr)
            return 1
    print("stopping", flush=True)
    return 0
