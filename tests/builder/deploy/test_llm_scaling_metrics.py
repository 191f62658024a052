"""The LLM HPA's adapter rule reads only series that both vLLM backends export: Triton's own
vLLM backend (what the vLLM image serves with) and the project's vllm_engine (the local target)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from builder.deploy import kserve
from builder.deploy.common import DeployOptions
from builder.python_models.vllm_engine.utils.metrics import METRICS
from builder.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parents[3]
# triton-inference-server/vllm_backend, src/utils/metrics.py at r25.10 (the release the
# Dockerfile pins): every MetricFamily it creates, and its kind. No gauge: vllm:num_requests_*
# were removed from it.
TRITON_VLLM_BACKEND_R25_10 = {
    "vllm:prompt_tokens_total": "COUNTER",
    "vllm:generation_tokens_total": "COUNTER",
    "vllm:time_to_first_token_seconds": "HISTOGRAM",
    "vllm:time_per_output_token_seconds": "HISTOGRAM",
    "vllm:e2e_request_latency_seconds": "HISTOGRAM",
    "vllm:request_prompt_tokens": "HISTOGRAM",
    "vllm:request_generation_tokens": "HISTOGRAM",
    "vllm:request_params_n": "HISTOGRAM",
}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")  # what Triton's metrics port shows of one
SERIES = re.compile(r"\b(vllm:[a-z0-9_]+|nv_[a-z0-9_]+)\b")


def exported(families: dict[str, str]) -> set[str]:
    names = set()
    for name, kind in families.items():
        names |= {name + s for s in HISTOGRAM_SERIES} if kind == "HISTOGRAM" else {name}
    return names


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


def llm_rules(spec: Spec) -> list[dict[str, object]]:
    rules = yaml.safe_load(kserve.adapter_rules(spec, DeployOptions())["data"]["config.yaml"])["rules"]
    return [r for r in rules if r["name"]["as"] == kserve.LLM_LOAD_METRIC]


def test_the_llm_rule_reads_what_both_backends_export(spec: Spec) -> None:
    (rule,) = llm_rules(spec)
    used = set(SERIES.findall(f"{rule['seriesQuery']} {rule['metricsQuery']}"))
    assert used
    assert used <= exported(TRITON_VLLM_BACKEND_R25_10), used - exported(TRITON_VLLM_BACKEND_R25_10)
    ours = exported({m.name: m.kind for m in METRICS})
    assert used <= ours, used - ours


def test_the_llm_hpa_scales_on_that_rule_with_the_engines_running_slots(spec: Spec) -> None:
    (one,) = spec.llms
    hpa = kserve.llm_autoscaler(one, DeployOptions())["spec"]
    (metric,) = hpa["metrics"]
    assert metric["pods"]["metric"]["name"] == kserve.LLM_LOAD_METRIC
    slots = one.gpu.max_num_seqs or one.max_num_seqs
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": str(slots)}
