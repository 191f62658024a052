"""Stage keys (builder/stages/base.py): a changed source file, data file or tool version re-runs
exactly the stages that read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.pipeline import build
from builder.records import BuildOptions
from builder.stages import base
from builder.stages.export import ExportInputs
from builder.stages.fp16 import Fp16Inputs
from builder.stages.reference import ReferenceInputs


def test_a_tool_version_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = Fp16Inputs(checked_sha256="abc").key()
    monkeypatch.setattr(base, "tool_version", lambda tool: "99.0" if tool == "onnxconverter-common" else "1")
    assert Fp16Inputs(checked_sha256="abc").key() != key


def test_transformers_is_a_tool_of_the_export_and_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint source's model is transformers' own: a new transformers exports it again."""
    stages = [
        ExportInputs(source="ckpt", source_fingerprint="f", inputs=[], outputs=[], max_batch_size=0,
                     profiles=[], opset=17),
        ReferenceInputs(exported_sha256="a", source_fingerprint="f", evaluation="e"),
    ]  # fmt: skip
    keys = [stage.key() for stage in stages]
    real = base.tool_version
    monkeypatch.setattr(base, "tool_version", lambda t: "99.0" if t == "transformers" else real(t))
    assert [stage.key() != key for stage, key in zip(stages, keys, strict=True)] == [True, True]


def run(project: Path) -> set[str]:
    result = build(BuildOptions(project / "models.yaml", project / "model_repository", target="local",
                                log=lambda _: None))  # fmt: skip
    return {s.name for b in result.models for s in b.stages if not s.skipped}


@pytest.mark.slow
def test_changed_inputs_rerun_exactly_their_stages(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The factory gains a helper module in the spec folder: editing the helper re-exports.
    (tiny_project / "tinyhelper.py").write_text("SEED = 0\n")
    zoo = tiny_project / "tinyzoo.py"
    future = "from __future__ import annotations\n"
    zoo.write_text(zoo.read_text().replace(future, future + "import tinyhelper  # noqa: F401\n"))
    assert "export" in run(tiny_project)
    assert run(tiny_project) == set()

    (tiny_project / "tinyhelper.py").write_text("SEED = 0  # edited\n")
    ran = run(tiny_project)
    assert {"export", "reference"} <= ran
    downstream = {"check", "fp16", "int8-ranges", "int8"}
    assert not downstream & ran, "the export's bytes did not change, so nothing after it re-runs"

    # New evaluation data: the reference, every verification and the INT8 search (it verifies on
    # them), nothing else.
    rng = np.random.default_rng(11)
    np.savez(tiny_project / "data" / "eval.npz", x=rng.normal(size=(32, 16)).astype(np.float32))
    verifications = {
        "verify-fp32",
        "verify-fp16",
        "verify-int8",
        "verify-fp32_openvino",
        "verify-int8_openvino",
    }
    # (and the sizing of the race's finalists, which new timings may change)
    ran = {name for name in run(tiny_project) if not name.startswith("size-")}
    assert ran == {"reference", "int8"} | verifications

    # New calibration data: INT8 (its calibration, its graph) and its verification on each runtime only.
    np.savez(tiny_project / "data" / "calib.npz", x=rng.normal(size=(64, 16)).astype(np.float32))
    ran = {s for s in run(tiny_project) if not s.startswith("size-")}
    assert {"int8-ranges", "int8"} <= ran <= {"int8-ranges", "int8", "verify-int8", "verify-int8_openvino"}

    # A new onnxconverter-common: the FP16 conversion (and its check if its bytes changed).
    real = base.tool_version
    monkeypatch.setattr(base, "tool_version", lambda t: "99.0" if t == "onnxconverter-common" else real(t))
    ran = run(tiny_project)
    assert "fp16" in ran and ran <= {"fp16", "verify-fp16"}
