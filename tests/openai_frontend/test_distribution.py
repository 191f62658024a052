"""The endpoint as its own distribution (`openai_frontend/pyproject.toml`, `tritonforge-openai`):
it imports nothing of the builder, and installed alone with the clients' wheel into a fresh
virtual environment, `python -m openai_frontend` serves (no tritonserver behind it: 503)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tomllib

from builder.server import find_free_port
from tests.distribution import assert_imports_nothing_unshipped, venv_with

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "openai_frontend"
CLIENTS = ROOT / "clients"
KEY = "sk-dist"


def test_the_endpoint_imports_nothing_from_builder() -> None:
    assert_imports_nothing_unshipped(PACKAGE)


def test_pyproject_depends_on_the_clients_and_the_endpoints_imports() -> None:
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    clients = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]
    assert project["name"] == "tritonforge-openai"
    assert f"{clients['name']}=={clients['version']}" in project["dependencies"]
    wanted = (ROOT / "deploy" / "requirements-openai.txt").read_text().split()
    for name in ("fastapi", "openai", "pydantic", "uvicorn"):
        assert name in project["dependencies"] and name in wanted


def _requirements() -> list[str]:
    """The endpoint's dependencies at the versions the suite runs (requirements/llm.txt), the
    clients' as their pyproject pins them."""
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements" / "llm.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    clients = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]["dependencies"]
    own = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]["dependencies"]
    named = [d for d in own if not d.startswith("tritonforge-")]
    return [*clients, *(f"{d}=={pins[d]}" if d in pins else d for d in named)]


@pytest.fixture(scope="module")
def endpoint_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the clients' and the endpoint's wheels and their dependencies."""
    return venv_with(tmp_path_factory.mktemp("openai-dist"), [CLIENTS, PACKAGE], _requirements())


@pytest.mark.slow
def test_installed_alone_it_serves(endpoint_venv: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["TRITONFORGE_OPENAI_API_KEY"] = KEY
    check = subprocess.run(
        [str(endpoint_venv), "-I", "-c", "import importlib.util as u, openai_frontend.app, openai_frontend; "
         "print(u.find_spec('builder') is None, openai_frontend.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    alone, where = check.stdout.split()
    assert alone == "True" and Path(where).is_relative_to(endpoint_venv.parents[1])
    port = find_free_port()
    nowhere = f"127.0.0.1:{find_free_port()}"
    cmd = [str(endpoint_venv), "-I", "-m", "openai_frontend", "--triton", nowhere, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        status, body = _get(f"http://127.0.0.1:{port}/v1/models", KEY, proc)
        assert status == 503 and body["error"]["type"] == "server_error", body
        assert _get(f"http://127.0.0.1:{port}/v1/models", "wrong", proc)[0] == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _get(url: str, key: str, proc: subprocess.Popen[bytes]) -> tuple[int, dict[str, dict[str, str]]]:
    """The status and JSON body of a GET, once the endpoint listens (30 s at most)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except urllib.error.URLError:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "the endpoint did not listen within 30 s"
            time.sleep(0.2)
