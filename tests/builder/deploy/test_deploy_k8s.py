"""Kubernetes manifests: derived from the spec, valid for kubernetes-validate, planted defects caught."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate  # a pinned dev dependency: missing means a broken install
import pytest

from builder.deploy import k8s, sizing
from builder.deploy.common import DeployOptions
from builder.errors import UserError
from builder.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


def pod(spec: Spec, **opts: Any) -> dict[str, Any]:
    return k8s.deployment(spec, DeployOptions(**opts))["spec"]["template"]["spec"]


@pytest.mark.parametrize("opts", [{}, {"repository_url": "s3://bucket/repo", "gpus": 2}, {"gpus": 0}])
def test_every_manifest_passes_kubernetes_validate(spec: Spec, opts: dict[str, Any]) -> None:
    for doc in k8s.manifests(spec, DeployOptions(**opts)).values():
        k8s.validate(doc)


def unknown_field(doc: dict[str, Any]) -> None:
    doc["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}


def port_as_text(doc: dict[str, Any]) -> None:
    doc["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"


def no_selector(doc: dict[str, Any]) -> None:
    del doc["spec"]["selector"]


def medium_as_number(doc: dict[str, Any]) -> None:
    doc["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] = 1


@pytest.mark.parametrize("plant", [unknown_field, port_as_text, no_selector, medium_as_number])
def test_planted_defects_fail_kubernetes_validate(spec: Spec, plant: Any) -> None:
    doc = copy.deepcopy(k8s.deployment(spec, DeployOptions()))
    plant(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s.validate(doc)


def test_gpus_probes_and_shm(spec: Spec) -> None:
    (c,) = pod(spec, gpus=2)["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 600
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    (vol,) = [v for v in pod(spec)["volumes"] if v["name"] == "dshm"]
    assert vol["emptyDir"] == {"medium": "Memory", "sizeLimit": sizing.mebibytes(sizing.shm_bytes(spec, 1))}


def test_no_gpu_means_no_gpu_limit(spec: Spec) -> None:
    (c,) = pod(spec, gpus=0)["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_memory_request_covers_shm(spec: Spec) -> None:
    (c,) = pod(spec)["containers"]
    request = int(c["resources"]["requests"]["memory"].removesuffix("Mi"))
    assert request * sizing.MIB >= sizing.BASE_MEMORY_BYTES + sizing.shm_bytes(spec, 1)


def test_runs_as_non_root_without_privileges(spec: Spec) -> None:
    p = pod(spec)
    assert p["securityContext"]["runAsNonRoot"] and p["securityContext"]["runAsUser"] != 0
    sc = p["containers"][0]["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_repository_from_image_or_object_store(spec: Spec) -> None:
    def env(**opts: Any) -> dict[str, Any]:
        return {e["name"]: e for e in pod(spec, **opts)["containers"][0]["env"]}

    assert env()["TRITONFORGE_REPOSITORY"]["value"] == "/opt/tritonforge/model_repository"
    assert env(repository_url="gs://b/r")["TRITONFORGE_REPOSITORY"]["value"] == "gs://b/r"
    assert "envFrom" in pod(spec, repository_url="gs://b/r")["containers"][0]
    key = env()["TRITON_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
    assert key["name"] == "tritonforge-admin" and key["optional"] is True


def test_service_exposes_three_ports_and_metrics_are_scraped(spec: Spec) -> None:
    svc = k8s.service(DeployOptions())
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000, 8001, 8002]
    annotations = k8s.deployment(spec, DeployOptions())["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "8002"


def test_hpa_targets_the_deployment() -> None:
    hpa = k8s.autoscaler(DeployOptions(name="zoo", min_replicas=2, max_replicas=5))
    assert hpa["spec"]["scaleTargetRef"]["name"] == "zoo"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"name": "Bad_Name"}, "--name"),
        ({"gpus": -1}, "--gpus"),
        ({"min_replicas": 3, "max_replicas": 2}, "--max"),
    ],
)
def test_bad_options_name_the_option(opts: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError, match=field):
        DeployOptions(**opts)


def test_plans_and_the_timing_cache_live_on_a_volume_keyed_by_gpu_and_tensorrt(spec: Spec) -> None:
    # so a new pod (an HPA scale-out) serves the plans an earlier pod on such a GPU built
    docs = k8s.manifests(spec, DeployOptions(name="zoo"))
    claim = docs["engine-cache-pvc.yaml"]
    assert claim["kind"] == "PersistentVolumeClaim" and claim["metadata"]["name"] == "zoo-engine-cache"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    spec_ = docs["deployment.yaml"]["spec"]["template"]["spec"]
    (volume,) = [v for v in spec_["volumes"] if v["name"] == "engine-cache"]
    assert volume["persistentVolumeClaim"]["claimName"] == "zoo-engine-cache"
    (c,) = spec_["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "engine-cache"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TRITONFORGE_ENGINE_CACHE"] == mount["mountPath"]
    assert "engine-cache-pvc.yaml" not in k8s.manifests(spec, DeployOptions(gpus=0))


def test_the_autoscaler_follows_tritons_queue_time_not_cpu(spec: Spec) -> None:
    docs = k8s.manifests(spec, DeployOptions(name="zoo"))
    (metric,) = docs["hpa.yaml"]["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == k8s.QUEUE_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": str(k8s.QUEUE_TARGET_US)}
    # the Prometheus adapter rule that serves that metric from Triton's own counters
    rules = docs["prometheus-adapter-rules.yaml"]["data"]["config.yaml"]
    assert "nv_inference_queue_duration_us" in rules and "nv_inference_request_success" in rules
    assert k8s.QUEUE_METRIC in rules
