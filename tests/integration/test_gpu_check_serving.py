"""gpu_check's server comparison against the real tritonserver (the zoo on the local target):
the evaluation set at each profile's opt batch, the max batch and under dynamic batching."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.engines.profiles import profile_shapes
from builder.engines.trt_runner import verification_batches
from builder.server import TritonServer
from builder.spec import Variant, load_spec
from tests.conftest import built_stage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).parents[2]


def load_tool() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check_tool", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def resnet18_check(tool: Any, zoo_repo: Path, negate: bool = False) -> Any:
    model = load_spec(ROOT / "models.yaml").model("resnet18")
    entry = json.loads((zoo_repo / "manifest.json").read_text())["models"]["resnet18"]
    ref = built_stage(zoo_repo, "resnet18", "reference") / "inputs.npz"
    with np.load(ref) as i, np.load(ref.with_name("reference.npz")) as r:
        inputs, reference = {k: i[k] for k in i.files}, {k: (-r[k] if negate else r[k]) for k in r.files}
    served = entry["served"]
    profiles = profile_shapes(model)
    return tool.ServedCheck(
        "resnet18",
        served,
        inputs,
        reference,
        model.tolerances[Variant.parse(served).precision],
        model.outputs,
        verification_batches(model.max_batch_size, profiles),
        profiles,
    )


def test_the_served_answers_match_the_reference_at_every_batch_and_dynamically(
    triton: TritonServer, zoo_repo: Path
) -> None:
    tool = load_tool()
    base = f"{triton.http_url}/v2"
    result = tool.check_served(base, resnet18_check(tool, zoo_repo), time.monotonic() + 300)
    assert list(result["runs"]) == ["batch 8", "batch 32", "dynamic batching"]
    assert result["ok"], {
        label: {k: v for k, v in run.items() if k != "metrics"} for label, run in result["runs"].items()
    }
    assert result["profiles"] == [0]
    batching = result["runs"]["dynamic batching"]["batching"]  # Triton ran fewer executions
    assert batching["ok"] and batching["execution_count"] < batching["inference_count"], batching
    wrong = tool.check_served(base, resnet18_check(tool, zoo_repo, negate=True), time.monotonic() + 300)
    assert not wrong["ok"] and all(r["failures"] for r in wrong["runs"].values())
