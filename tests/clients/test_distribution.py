"""The clients as their own distribution (`clients/pyproject.toml`, `tritonforge-client`): installed
alone into a fresh virtual environment, they import and infer against the real server."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).parents[2]
CLIENTS = ROOT / "clients"
# Wheels of the clients' dependencies, kept between runs so that only the first run downloads them.
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonforge" / "client-wheels"

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


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_clients_import_nothing_from_builder() -> None:
    files = sorted(CLIENTS.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        bad = {m for m in _imported_modules(path) if m.split(".")[0] in ("builder", "tests", "bench", "zoo")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_pyproject_depends_on_tritonclient_numpy_and_prometheus_client_alone() -> None:
    project = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "tritonforge-client"
    pins = ["numpy==1.26.4", "tritonclient[grpc,http]==2.73.0", "prometheus-client==0.26.0"]
    assert project["dependencies"] == pins
    assert set(project["dependencies"]) <= set(root["dependencies"])  # the same pins as the root


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


def _wheelhouse(requirements: list[str]) -> Path:
    """The dependencies' wheels: from the kept wheelhouse when complete, else downloaded into it."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    offline = _pip(
        "download", "--no-index", "--find-links", str(WHEELHOUSE), "-d", str(WHEELHOUSE), *requirements
    )
    if offline.returncode != 0:
        online = _pip("download", "-d", str(WHEELHOUSE), *requirements)
        assert online.returncode == 0, online.stderr[-3000:]
    return WHEELHOUSE


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the clients' wheel and its dependencies, nothing else (not even pip)."""
    work = tmp_path_factory.mktemp("client-dist")
    source = work / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(CLIENTS, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    built = _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source))
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("tritonforge_client-*.whl")
    requirements = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]["dependencies"]
    wheels = _wheelhouse(requirements)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = _pip(
        "--python", str(python), "install", "--no-index", "--find-links", str(wheels), str(wheel)
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python


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
