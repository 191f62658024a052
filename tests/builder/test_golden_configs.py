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

from builder.host import cpu_has_native_bf16, cpu_has_vnni
from builder.pipeline import build
from builder.python_models.shared.runtimes import Sizing
from builder.records import BuildOptions, ModelBuild
from builder.spec import ONNXRUNTIME, Precision, Variant
from builder.targets import Target
from tests.conftest import ROOT, test_cache_dir

GOLDEN = ROOT / "tests" / "golden"
# Variants whose INT8 verifies only where ONNX Runtime's INT8 kernels have VNNI (cpu_has_vnni:
# the same flag the INT8 recipe reads): elsewhere they are not published. The golden copy is
# written on a CPU with VNNI.
VNNI_ONLY = {"efficientnet_lite0_int8/config.pbtxt"}
# Variants OpenVINO computes in bf16 only where the CPU has AVX-512 BF16 or AMX (cpu_has_native_bf16,
# the flags the variant's read-back precision follows), published on the cpu target; the golden copy
# is written on such a CPU.
BF16_ONLY = {"resnet18_bf16_openvino/config.pbtxt", "minilm_encoder_bf16_openvino/config.pbtxt"}
pytestmark = [pytest.mark.slow, pytest.mark.llm_build]


def configs(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): p.read_text() for p in sorted(repo.rglob("config.pbtxt"))}


FIXED_ORDER = [
    Variant(p, r)
    for r in (ONNXRUNTIME, "openvino")
    for p in (Precision.INT8, Precision.INT8_DYNAMIC, Precision.FP16, Precision.FP32, Precision.BF16)
]


def fastest_by_fixed_order(self: ModelBuild, among: list[Variant]) -> Variant | None:
    """Where the spec names no variant, the build serves the fastest measured one, which
    depends on the machine and its load; these configs take a fixed order instead."""
    return next((v for v in FIXED_ORDER if v in among), None)


def the_specs_sizing(self: Target, build: ModelBuild, variant: Variant) -> Sizing:
    """A served variant's instances and threads are measured on the building host too
    (builder/stages/size.py); these configs take the spec's (tests/builder/targets cover the rest)."""
    return Sizing(build.spec.instances.count, self.knobs(build.spec))


@pytest.mark.parametrize("target", ["local", "cpu", "gpu"])
def test_zoo_configs_match_golden(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ModelBuild, "fastest", fastest_by_fixed_order)
    monkeypatch.setattr(Target, "sizing_of", the_specs_sizing)
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
        assert cpu_has_vnni() and cpu_has_native_bf16(), "regenerate on a CPU with VNNI and bf16 (see *_ONLY)"
        shutil.rmtree(golden_dir, ignore_errors=True)
        for rel, text in produced.items():
            (golden_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / rel).write_text(text)
    expected = configs(golden_dir)
    if not cpu_has_vnni():
        expected = {name: text for name, text in expected.items() if name not in VNNI_ONLY}
    if not cpu_has_native_bf16():
        expected = {name: text for name, text in expected.items() if name not in BF16_ONLY}
    assert produced == expected
