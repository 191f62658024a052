"""Fallback for development only: a small Python-backend repository with the zoo's signatures
(`simple`, `minilm_embed`, `resnet18_image`) and a bare tritonserver launcher.

Used by tests/clients/conftest.py only when the shared fixtures of tests/integration are absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

_SIMPLE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return out
"""

# Deterministic stand-ins: a hash of the bytes seeds the values.
_HASHED = """
import hashlib
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            items = pb_utils.get_input_tensor_by_name(r, "{inp}").as_numpy().reshape(-1)
            rows = []
            for item in items:
                seed = int.from_bytes(hashlib.sha256(bytes(item)).digest()[:4], "little")
                v = np.random.default_rng(seed).standard_normal({dim}).astype(np.float32)
                rows.append(v / np.linalg.norm(v) if {normalise} else v)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("{out}", np.stack(rows))]))
        return out
"""


def _tensor(name: str, dtype: int, dims: list[int], labels: str = "") -> mc.ModelInput:
    return mc.ModelInput(name=name, data_type=dtype, dims=dims)


def _model(repo: Path, config: mc.ModelConfig, source: str, labels: list[str] | None = None) -> None:
    folder = repo / config.name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(source)
    if labels:
        (folder / "labels.txt").write_text("\n".join(labels) + "\n")
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))


def build_dev_repo(repo: Path) -> Path:
    """Write the three stand-in models into `repo` (returned)."""
    batching = mc.ModelDynamicBatching(default_queue_policy=mc.ModelQueuePolicy(max_queue_size=256))
    cpu = [mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)]
    i32, f32, s = mc.TYPE_INT32, mc.TYPE_FP32, mc.TYPE_STRING
    simple = mc.ModelConfig(
        name="simple", backend="python", max_batch_size=8, dynamic_batching=batching, instance_group=cpu
    )
    simple.input.extend([mc.ModelInput(name=n, data_type=i32, dims=[16]) for n in ("INPUT0", "INPUT1")])
    simple.output.extend([mc.ModelOutput(name=n, data_type=i32, dims=[16]) for n in ("OUTPUT0", "OUTPUT1")])
    _model(repo, simple, _SIMPLE)

    embed = mc.ModelConfig(
        name="minilm_embed",
        backend="python",
        max_batch_size=16,
        dynamic_batching=batching,
        instance_group=cpu,
    )
    embed.input.append(mc.ModelInput(name="TEXT", data_type=s, dims=[1]))
    embed.output.append(mc.ModelOutput(name="EMBEDDING", data_type=f32, dims=[384]))
    _model(repo, embed, _HASHED.format(inp="TEXT", out="EMBEDDING", dim=384, normalise=True))

    image = mc.ModelConfig(
        name="resnet18_image",
        backend="python",
        max_batch_size=32,
        dynamic_batching=batching,
        instance_group=cpu,
    )
    image.input.append(mc.ModelInput(name="IMAGE", data_type=s, dims=[1]))
    image.output.append(
        mc.ModelOutput(name="LOGITS", data_type=f32, dims=[1000], label_filename="labels.txt")
    )
    _model(
        repo,
        image,
        _HASHED.format(inp="IMAGE", out="LOGITS", dim=1000, normalise=False),
        labels=[f"class_{i}" for i in range(1000)],
    )
    return repo


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _backend_dir(scratch: Path) -> Path:
    import pytriton

    root = Path(pytriton.__file__).parent / "tritonserver"
    python_dir = scratch / "backends" / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for item in (root / "backends" / "python").iterdir():
        if item.is_file():
            shutil.copy2(item, python_dir / item.name)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy2(root / "python_backend_stubs" / version / "triton_python_backend_stub", python_dir)
    return scratch / "backends"


class DevServer:
    """A tritonserver on free loopback ports, serving `repo` (same surface as builder's TritonServer)."""

    def __init__(self, repo: Path, scratch: Path) -> None:
        self.repo, self.scratch = repo, scratch
        self.http_port, self.grpc_port, self.metrics_port = _free_port(), _free_port(), _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 120.0) -> DevServer:
        import pytriton

        root = Path(pytriton.__file__).parent
        libs = [sysconfig.get_config_var("LIBDIR"), str(root.parent / "nvidia_pytriton.libs")]
        env = dict(os.environ, LD_LIBRARY_PATH=":".join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]))
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        cmd = [
            str(root / "tritonserver" / "bin" / "tritonserver"),
            f"--model-repository={self.repo}",
            f"--backend-directory={_backend_dir(self.scratch)}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
        ]
        log = open(self.scratch / f"server-{self.grpc_port}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        client = grpcclient.InferenceServerClient(self.grpc_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited; see {log.name}")
            try:
                if client.is_server_ready():
                    return self
            except Exception:
                pass
            time.sleep(0.3)
        self.stop()
        raise TimeoutError("tritonserver did not become ready")

    def stop(self, timeout: float = 30) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
