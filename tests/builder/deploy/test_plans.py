"""``tritonforge engines`` on a built gpu repository: only the plans go in, from the stages the
build left in the cache; every other entry stays as published (an entry moved out stays out),
and a repository or cache that does not fit the spec is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.pipeline import build
from builder.records import BuildOptions
from tests.conftest import tree_digest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
DOUBLE_DIR = ROOT / "tests" / "builder" / "engines" / "trt_double"
MAIN = "import sys; from builder.cli import main; sys.exit(main(sys.argv[1:]))"


def engines(project: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": f"{DOUBLE_DIR}:{ROOT}", "TRT_DOUBLE_GPU": "NVIDIA A10:8.6", "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-c", MAIN, "engines", "--if-stale", "--require-engines"]
    cmd += ["--spec", str(project / "models.yaml"), "--repo", str(project / "model_repository"), *extra]
    return subprocess.run(cmd, env=env, cwd=project, capture_output=True, text=True, timeout=600)


@pytest.fixture
def built(tiny_project: Path) -> Path:
    """The tiny project's gpu repository as the builder stage leaves it (no TensorRT there),
    with its ONNX Runtime entry moved out, as the vLLM entries are for the serving image."""
    repo = tiny_project / "model_repository"
    build(BuildOptions(spec_file=tiny_project / "models.yaml", repo=repo, target="gpu", log=lambda _: None))
    moved = tiny_project / "moved_out"
    (repo / "tiny_onnx").rename(moved)
    return repo


def test_only_the_plans_go_in_and_a_second_start_changes_nothing(built: Path) -> None:
    before = {p.relative_to(built) for p in built.rglob("*")}
    started = engines(built.parent)
    assert started.returncode == 0, started.stderr[-3000:]
    after = {p.relative_to(built) for p in built.rglob("*")}
    added = {str(p) for p in after - before}
    assert added == {"tiny/1/model.plan", "tiny/1/model.plan.json"}, added
    assert before - after == set() and not (built / "tiny_onnx").exists()
    manifest = json.loads((built / "manifest.json").read_text())
    assert set(manifest["models"]["tiny"]["artifacts"]) >= {"tiny/1/model.plan", "tiny/1/model.plan.json"}
    assert manifest["engines"]["key"]
    assert (built / "tiny" / "1" / "model.plan").read_bytes().startswith(b"PLAN-DOUBLE")

    digest = tree_digest(built)
    again = engines(built.parent)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "holds these plans already, skipped" in again.stderr
    assert tree_digest(built) == digest


def test_a_repository_built_from_another_spec_is_refused_in_one_line(built: Path) -> None:
    spec = built.parent / "models.yaml"
    spec.write_text(spec.read_text() + "\n# edited after the build\n")
    refused = engines(built.parent)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]  # one line
    assert "manifest.json" in refused.stderr and "spec_sha256" in refused.stderr
    assert not any((built / "tiny" / "1").glob("*.plan"))


def test_a_cache_without_the_builds_stages_is_refused_in_one_line(built: Path, tmp_path: Path) -> None:
    refused = engines(built.parent, "--cache", str(tmp_path / "empty-cache"))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]
    assert "model 'tiny'" in refused.stderr and "not in the stage cache" in refused.stderr


# KServe mounts an emptyDir exactly at /mnt/models, in a /mnt this user cannot write: the same
# layout here, in a user and mount namespace of its own (a tmpfs on a read-only parent). The
# hosts the tests run on have `unshare -rm` (util-linux): without it this test fails.
KSERVE_MOUNT = """\
set -e
mkdir -p "$MNT/models"
mount --bind "$MNT" "$MNT"
mount -o remount,bind,ro "$MNT"
mount -t tmpfs -o size=256m models "$MNT/models"
cp -a "$SRC/." "$MNT/models/"
for start in 1 2; do
  "$PY" -c "$MAIN" engines --if-stale --require-engines --spec "$SPEC" --repo "$MNT/models" || exit $?
done
echo "== repository"; (cd "$MNT/models" && find . | sort)
echo "== parent"; ls -A "$MNT"
"""


def test_plans_go_into_a_repository_that_is_a_mount_point_under_a_read_only_parent(
    built: Path, tmp_path: Path
) -> None:
    project = built.parent
    env = {
        "PYTHONPATH": f"{DOUBLE_DIR}:{ROOT}", "TRT_DOUBLE_GPU": "NVIDIA A10:8.6", "PATH": "/usr/bin:/bin",
        "MNT": str(tmp_path / "mnt"), "SRC": str(built), "PY": sys.executable, "MAIN": MAIN,
        "SPEC": str(project / "models.yaml"),
    }  # fmt: skip
    run = subprocess.run(["unshare", "-rm", "sh", "-c", KSERVE_MOUNT], env=env, cwd=project,
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    listing, parent = run.stdout.split("== repository\n")[1].split("== parent\n")
    files = set(listing.split())
    assert {"./tiny/1/model.plan", "./tiny/1/model.plan.json", "./manifest.json"} <= files
    assert not [f for f in files if "staging" in f or f.endswith(".old")], listing
    assert parent.split() == ["models"]
    assert "holds these plans already, skipped" in run.stderr  # the second start
