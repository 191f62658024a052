"""The packaged SmolLM2 GGUF exported once per session for the slow LLM tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.llm.export import Exported, export
from builder.spec.llm import LLMDType


@pytest.fixture(scope="session")
def smollm2_export(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    from zoo.smollm2 import gguf

    out = tmp_path_factory.mktemp("smollm2") / "checkpoint"
    log = out.parent / "export.log"
    return export(gguf(), out, LLMDType.BFLOAT16, file="models.yaml", model="smollm2", log=log)


@pytest.fixture
def smollm2_checkpoint(smollm2_export: Exported) -> Path:
    return smollm2_export.folder
