"""The Dockerfile's stages, as written, on the default models.yaml, without Docker.

Each stage's instructions are read from the Dockerfile (tests/integration/fixtures/docker_stages.py):
its COPY lines fill a folder standing for the image's ``/``, its RUN lines run there, each stage in
a venv that holds only what its own ``RUN pip`` lines install. The builder stage builds the gpu
repository and moves the LLM out; the serving stage's entrypoint builds the TensorRT plans (the
project's TensorRT double, on a GPU it reports as an A10) and a real tritonserver then loads the
repository it leaves, with the vLLM stage's repository beside it; the vLLM stage's entrypoint
starts the OpenAI-compatible endpoint with the key from the environment. Stages come from the
tests' stage cache, so this proves the installs, the imports and the commands, not the models.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from builder.cache import tree_hash
from builder.configs import read_config
from builder.server import TritonServer
from builder.spec import load_spec
from tests.builder.deploy.test_serving_image import FAKE_SMI
from tests.conftest import test_cache_dir
from tests.integration.fixtures.docker_stages import ROOT, StageRun, Stages, run_stages

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.llm_build]

# What the -py3 image serves with; Triton's vLLM backend is only in the -vllm-python-py3 image.
PY3_IMAGE = {"tensorrt_plan", "onnxruntime_onnx", "python", "ensemble"}
FAKE_SERVER = '#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_LOG/server"\n{wait}\n'
KEY = "sk-stage-test"


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> Stages:
    stages = run_stages(tmp_path_factory.mktemp("stages"), test_cache_dir())
    print(f"stage seconds: {stages.seconds}")
    return stages


def configs(repo: Path) -> dict[str, object]:
    return {p.parent.name: read_config(p) for p in repo.glob("*/config.pbtxt")}


def test_the_builder_stage_builds_the_default_zoo_and_moves_the_llm_out(stages: Stages) -> None:
    builder = stages.runs["builder"]
    repo = Path(builder.rebase("/opt/tritonforge/model_repository"))
    llm_repo = Path(builder.rebase("/opt/tritonforge/llm_repository"))
    spec = load_spec(ROOT / "models.yaml")
    served = configs(repo)
    for model in spec.models:
        assert served[model.name].platform == "tensorrt_plan", model.name  # type: ignore[attr-defined]
        assert served[f"{model.name}_onnx"].platform == "onnxruntime_onnx"  # type: ignore[attr-defined]
    assert {pm.name for pm in spec.python_models} <= set(served)
    llms = configs(llm_repo)
    assert sorted(llms) == sorted(llm.name for llm in spec.llms)
    assert all(cfg.backend == "vllm" for cfg in llms.values())  # type: ignore[attr-defined]
    assert not set(llms) & set(served)
    assert list((Path(stages.runs["builder"].rebase("/wheels"))).glob("tritonforge-*.whl"))


@pytest.mark.parametrize("stage", ["builder", "server"])
def test_each_stage_runs_this_trees_builder_package(stages: Stages, stage: str) -> None:
    """A kept venv's tritonforge has the version of every edit: pip must install it again, as the
    Docker layer after ``COPY builder`` runs again."""
    (installed,) = stages.runs[stage].venv.glob("lib/python*/site-packages/builder")
    assert tree_hash(installed) == tree_hash(ROOT / "builder")


def start_entrypoint(
    run: StageRun, tmp_path: Path, server: str, env: dict[str, str]
) -> subprocess.Popen[str]:
    """The stage's ENTRYPOINT script (NVIDIA's own wrapper before it is the image's), with
    nvidia-smi reporting one A10 and a tritonserver that records its arguments."""
    (entry,) = [i.args for i in run.stage.instructions if i.keyword == "ENTRYPOINT"]
    script = Path(run.rebase(json.loads(entry)[-1]))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {"nvidia-smi": FAKE_SMI, "tritonserver": server}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    full = {**run.env, **env, "PATH": f"{bin_dir}:{run.env['PATH']}", "FAKE_LOG": str(tmp_path)}
    return subprocess.Popen(
        ["bash", str(script)], env=full, cwd=run.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip


def repository_index(server: TritonServer) -> dict[str, dict]:
    request = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return {m["name"]: m for m in json.load(response)}


def test_the_serving_stage_builds_the_plans_and_triton_loads_its_repository(
    stages: Stages, tmp_path: Path
) -> None:
    server = stages.runs["server"]
    began = time.monotonic()
    proc = start_entrypoint(server, tmp_path, FAKE_SERVER.format(wait=""), {})
    _, err = proc.communicate(timeout=900)
    print(f"entrypoint (tritonforge engines) seconds: {time.monotonic() - began:.1f}")
    assert proc.returncode == 0, err[-4000:]
    repo = Path(server.env["TRITONFORGE_REPOSITORY"])
    args = (tmp_path / "server").read_text().splitlines()
    assert f"--model-repository={repo}" in args and "--exit-on-error=true" in args
    spec = load_spec(ROOT / "models.yaml")
    for model in spec.models:
        plan = repo / model.name / "1" / "model.plan"
        assert plan.read_bytes().startswith(b"PLAN-DOUBLE"), model.name
    found = configs(repo)
    backends = {cfg.platform or cfg.backend for cfg in found.values()}  # type: ignore[attr-defined]
    assert backends <= PY3_IMAGE, backends - PY3_IMAGE  # with --exit-on-error, anything else stops it

    llm_repo = Path(stages.runs["vllm"].env["TRITONFORGE_REPOSITORY"])
    extra = [f"--model-repository={llm_repo}", "--exit-on-error=false", "--strict-readiness=false"]
    with TritonServer(repo, extra_args=extra, log_path=tmp_path / "tritonserver.log") as triton:
        index = repository_index(triton)
    for name, cfg in found.items():
        state, reason = index[name].get("state"), index[name].get("reason", "")
        if cfg.backend == "python":  # type: ignore[attr-defined]
            assert state == "READY", (name, index[name])
        elif cfg.platform != "ensemble":  # type: ignore[attr-defined]
            # This server has the Python backend only: a config it refused would stop earlier.
            assert "unable to find backend library" in reason, (name, reason)
    for llm in spec.llms:
        assert "unable to find backend library for backend 'vllm'" in index[llm.name].get("reason", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str, key: str | None) -> int | None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def test_the_vllm_stage_starts_the_openai_endpoint_with_the_key(stages: Stages, tmp_path: Path) -> None:
    vllm = stages.runs["vllm"]
    port = free_port()
    env = {"TRITONFORGE_OPENAI_API_KEY": KEY, "TRITONFORGE_OPENAI_PORT": str(port)}
    proc = start_entrypoint(vllm, tmp_path, FAKE_SERVER.format(wait="exec sleep 300"), env)
    url = f"http://127.0.0.1:{port}/v1/models"
    try:
        deadline = time.monotonic() + 120
        while status(url, None) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status(url, None) == 401, proc.stderr.read() if proc.poll() is not None else "no endpoint"
        assert status(url, KEY) not in (None, 401)  # past the key; Triton itself is not here
        args = (tmp_path / "server").read_text().splitlines()
        assert f"--model-repository={vllm.env['TRITONFORGE_REPOSITORY']}" in args
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    exposed = " ".join(i.args for i in vllm.stage.instructions if i.keyword == "EXPOSE").split()
    assert exposed == ["8000", "8001", "8002", "9000"]
