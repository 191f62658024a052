"""Every config.pbtxt the default zoo gets, per target, against the committed golden copy.

A change to any generated config must come with its golden file updated in the same commit
(and the commit saying why): regenerate with ``TRITONFORGE_UPDATE_GOLDEN=1 pytest
tests/builder/test_golden_configs.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from builder.pipeline import build
from builder.records import BuildOptions, ModelBuild
from builder.spec import Precision
from builder.stages.inputs import cpu_has_vnni
from tests.conftest import ROOT, test_cache_dir

GOLDEN = ROOT / "tests" / "golden"
# Variants whose INT8 verifies only where ONNX Runtime's INT8 kernels have VNNI (cpu_has_vnni:
# the same flag the INT8 recipe reads): elsewhere they are not published. The golden copy is
# written on a CPU with VNNI.
VNNI_ONLY = {"efficientnet_lite0_int8/config.pbtxt"}
pytestmark = pytest.mark.slow


def configs(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): p.read_text() for p in sorted(repo.rglob("config.pbtxt"))}


FIXED_ORDER = (Precision.INT8, Precision.INT8_DYNAMIC, Precision.FP16, Precision.FP32)


def fastest_by_fixed_order(self: ModelBuild, among: list[Precision]) -> Precision | None:
    """Where the spec names no variant, the build serves the fastest measured one, which
    depends on the machine and its load; these configs take a fixed order instead."""
    return next((p for p in FIXED_ORDER if p in among), None)


@pytest.mark.parametrize("target", ["local", "cpu", "gpu"])
def test_zoo_configs_match_golden(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ModelBuild, "fastest", fastest_by_fixed_order)
    repo = tmp_path / "model_repository"
    opts = BuildOptions(
        spec_file=ROOT / "models.yaml",
        repo=repo,
        target=target,
        cache_dir=test_cache_dir(),
        log=lambda _: None,
    )
    build(opts)
    produced = configs(repo)
    golden_dir = GOLDEN / target
    if os.environ.get("TRITONFORGE_UPDATE_GOLDEN") == "1":
        assert cpu_has_vnni(), "regenerate the golden configs on a CPU with VNNI (see VNNI_ONLY)"
        shutil.rmtree(golden_dir, ignore_errors=True)
        for rel, text in produced.items():
            (golden_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / rel).write_text(text)
    expected = configs(golden_dir)
    if not cpu_has_vnni():
        expected = {name: text for name, text in expected.items() if name not in VNNI_ONLY}
    assert produced == expected
