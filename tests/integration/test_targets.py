"""cpu and gpu repositories: every config parses strictly and passes the real server's validation.

The pip-installed tritonserver has only the Python backend, but it validates each
config before it looks for the backend library, so a container-target model may
stop only at ``unable to find backend library``; a config error would stop earlier
with Triton's own message. The cpu target's LLM runs on the Python backend: its folder is the
local target's, byte for byte, which the LLM tests serve, so this server leaves it out rather
than start a third vLLM engine on the same files.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from builder.cache import tree_hash
from builder.configs import read_config
from builder.pipeline import build
from builder.records import BuildOptions
from builder.server import TritonServer
from builder.spec import load_spec
from tests.conftest import test_cache_dir

# Builds models.yaml: on a cold stage cache its LLM is verified on two engines (tests/engines.py).
pytestmark = [pytest.mark.integration, pytest.mark.llm_build]

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "models.yaml"
BACKEND = {"onnxruntime_onnx": "onnxruntime", "tensorrt_plan": "tensorrt"}


def build_target(target: str, tmp_path: Path) -> Path:
    repo = tmp_path / f"{target}_repository"
    build(BuildOptions(SPEC, repo, target=target, cache_dir=test_cache_dir(), log=lambda _: None))
    return repo


def repository_index(server: TritonServer) -> dict[str, dict]:
    request = urllib.request.Request(f"{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return {m["name"]: m for m in json.load(response)}


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_container_target_repository_is_valid(target: str, tmp_path: Path) -> None:
    repo = build_target(target, tmp_path)
    configs = {p.parent.name: read_config(p) for p in repo.glob("*/config.pbtxt")}
    assert configs, "no models written"
    core = {name for name, cfg in configs.items() if cfg.platform in ("onnxruntime_onnx", "tensorrt_plan")}
    assert "resnet18" in core and "simple" in core
    if target == "gpu":
        assert configs["resnet18"].platform == "tensorrt_plan"
        assert configs["resnet18_onnx"].platform == "onnxruntime_onnx"
        profile_max = configs["resnet18"].max_batch_size
        assert profile_max == configs["resnet18_onnx"].max_batch_size == 32
    python_llms = [llm.name for llm in load_spec(SPEC).llms if configs[llm.name].backend == "python"]
    if python_llms:
        local = build_target("local", tmp_path)
        for name in python_llms:
            assert tree_hash(repo / name) == tree_hash(local / name), name
    loaded = [n for n in configs if n not in python_llms]
    server = TritonServer(
        repo, model_control="explicit", load_models=loaded,
        extra_args=["--exit-on-error=false", "--strict-readiness=false"],
    )  # fmt: skip
    with server:
        index = repository_index(server)
    for name in core:
        reason = index[name].get("reason", "")
        assert index[name]["state"] == "UNAVAILABLE", (name, index[name])
        backend = BACKEND[configs[name].platform]
        assert f"unable to find backend library for backend '{backend}'" in reason, (name, reason)
    for name, cfg in configs.items():
        if cfg.backend == "python" and name not in python_llms:
            assert index[name]["state"] == "READY", (name, index[name])
