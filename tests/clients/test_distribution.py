"""The clients as their own distribution (`clients/pyproject.toml`, `tritonforge-client`): installed
alone into a fresh virtual environment, they import and infer against the real server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomllib

from tests.distribution import assert_imports_nothing_unshipped, venv_with

ROOT = Path(__file__).parents[2]
CLIENTS = ROOT / "clients"

SCRIPT = """
import asyncio, importlib.metadata, importlib.util, json, sys
from pathlib import Path

import numpy as np

import clients
from clients import AsyncClient, Client
from clients.perf import PerfError
from clients.perf.report import plot

grpc_url, http_url = sys.argv[1:3]
a = np.arange(32, dtype=np.int32).reshape(2, 16)
found = {}
for url in (grpc_url, http_url):
    with Client(url, timeout=30) as c:
        c.wait_until_ready(30, model="simple")
        found[url] = c.infer("simple", {"INPUT0": a, "INPUT1": a}, shm=True)["OUTPUT0"].tolist()


async def infer_async():
    async with AsyncClient(grpc_url, timeout=30) as c:
        return (await c.infer_many("simple", [{"INPUT0": a, "INPUT1": a}] * 3))[2]["OUTPUT1"].tolist()


try:
    plot(None, Path("p.png"))
    plot_error = ""
except PerfError as exc:
    plot_error = str(exc)
print(json.dumps({
    "file": clients.__file__,
    "builder": importlib.util.find_spec("builder") is not None,
    "sum": found,
    "difference": asyncio.run(infer_async()),
    "plot_error": plot_error,
    "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
}))
"""


def test_clients_import_nothing_from_builder() -> None:
    assert_imports_nothing_unshipped(CLIENTS)


def test_pyproject_depends_on_tritonclient_numpy_and_prometheus_client_alone() -> None:
    project = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "tritonforge-client"
    pins = ["numpy==1.26.4", "tritonclient[grpc,http]==2.73.0", "prometheus-client==0.26.0"]
    assert project["dependencies"] == pins
    assert set(project["dependencies"]) <= set(root["dependencies"])  # the same pins as the root


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the clients' wheel and its dependencies, nothing else (not even pip)."""
    requirements = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]["dependencies"]
    return venv_with(tmp_path_factory.mktemp("client-dist"), [CLIENTS], requirements)


@pytest.mark.integration
@pytest.mark.slow
def test_installed_alone_it_infers_against_the_real_server(
    client_venv: Path, triton: Any, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    done = subprocess.run(
        [str(client_venv), "-I", "-c", SCRIPT, triton.grpc_url, triton.http_url],
        cwd=tmp_path,  # not the checkout: only the venv's clients can be imported
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert Path(report["file"]).is_relative_to(client_venv.parents[1]), report["file"]
    assert report["builder"] is False
    want = [[2 * v for v in range(16)], [2 * v for v in range(16, 32)]]
    assert report["sum"] == {triton.grpc_url: want, triton.http_url: want}
    assert report["difference"] == [[0] * 16, [0] * 16]
    assert "pip install 'tritonforge-client[perf]'" in report["plot_error"]
    distributions = set(report["distributions"])
    assert {"tritonforge-client", "tritonclient", "numpy", "grpcio"} <= distributions
    assert not distributions & {
        "tritonforge",
        "onnxruntime",
        "polygraphy",
        "nvidia-pytriton",
        "matplotlib",
        "pip",
    }
