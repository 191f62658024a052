"""The serving image's start, as far as it runs without Docker or a GPU.

The builder stage is the real build of a small project for the gpu target (every
package installed). The serving stage is the real ``deploy/entrypoint.sh`` and the
real ``tritonforge`` it calls, in a Python that refuses every package the serving
image does not install (build subprocesses included); only TensorRT (the recording
double, whose plans run as their ONNX in ONNX Runtime), nvidia-smi and tritonserver
are stand-ins.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.pipeline import BuildOptions, build
from tests.builder.deploy.test_dockerfile import serving_site

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
DOUBLE_DIR = ROOT / "tests" / "builder" / "engines" / "trt_double"
DOUBLE_RUNNER = (
    "import trt_double_runner\ntrt_double_runner.install()"  # what trt_double's sitecustomize does
)

FAKE_SMI = """#!/bin/bash
# nvidia-smi on a host with one A10: `-L`, and `--query-gpu=` with the fields asked for
case "$1" in
  -L) echo "GPU 0: NVIDIA A10 (UUID: GPU-8f3c2b1a)";;
  --query-gpu=*)
    IFS=, read -ra fields <<< "${1#--query-gpu=}"
    out=()
    for f in "${fields[@]}"; do
      case "$f" in index) out+=(0);; uuid) out+=(GPU-8f3c2b1a);; name) out+=("NVIDIA A10");;
        compute_cap) out+=(8.6);; *) echo "unknown field $f" >&2; exit 2;; esac
    done
    (IFS=,; echo "${out[*]}" | sed 's/,/, /g');;
  *) exit 2;;
esac
"""
FAKE_SERVER = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/server"
"""


def serving_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    main = "import sys; from builder.cli import main; sys.exit(main())"
    forge = f"#!/bin/bash\nexec {sys.executable} -c '{main}' \"$@\"\n"
    for name, text in {"tritonforge": forge, "nvidia-smi": FAKE_SMI, "tritonserver": FAKE_SERVER}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def start_container(project: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{serving_bin(tmp_path)}:/usr/bin:/bin",
        "PYTHONPATH": f"{serving_site(tmp_path / 'site', DOUBLE_RUNNER)}:{DOUBLE_DIR}:{ROOT}",
        "TRT_DOUBLE_JOURNAL": str(tmp_path / "journal.jsonl"),
        "TRT_DOUBLE_GPU": "NVIDIA A10:8.6",  # what CUDA (cuda-python's double) reports
        "TRITONFORGE_SPEC": str(project / "models.yaml"),
        "TRITONFORGE_REPOSITORY": str(project / "model_repository"),
        "FAKE_LOG": str(tmp_path),
        "HOME": str(tmp_path),
    }
    cmd = ["bash", str(ROOT / "deploy" / "entrypoint.sh")]
    return subprocess.run(cmd, env=env, cwd=project, capture_output=True, text=True, timeout=600)


def test_the_entrypoint_builds_and_installs_plans_with_only_the_serving_packages(
    tiny_project: Path, tmp_path: Path
) -> None:
    repo = tiny_project / "model_repository"
    build(BuildOptions(spec_file=tiny_project / "models.yaml", repo=repo, target="gpu", log=lambda _: None))
    assert not any((repo / "tiny" / "1").glob("*.plan"))  # no TensorRT in the builder stage

    started = start_container(tiny_project, tmp_path)
    assert "not in the serving image" not in started.stderr, started.stderr[-3000:]
    assert started.returncode == 0, started.stderr[-3000:]
    assert f"--model-repository={repo}" in (tmp_path / "server").read_text().splitlines()
    plan = repo / "tiny" / "1" / "model.plan"
    assert plan.read_bytes().startswith(b"PLAN-DOUBLE")
    meta = json.loads((repo / "tiny" / "1" / "model.plan.json").read_text())
    assert (meta["gpu_name"], meta["compute_capability"]) == ("NVIDIA A10", "8.6")
    assert meta["verification"]  # the plan ran (its ONNX, in ONNX Runtime) and was verified
