"""Kubernetes manifests for the tritonforge image: Deployment, Service, HorizontalPodAutoscaler.

Built as plain data and dumped with yaml. The container runs the image's
entrypoint (deploy/entrypoint.sh), which builds stale TensorRT plans for the
GPU it finds and then execs tritonserver with the safe defaults, so the flags
live in one place.
"""

from __future__ import annotations

from builder.spec import Spec

from . import llm
from .common import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    SHM_MOUNT,
    DeployOptions,
    Manifest,
    admin_key_env,
    container_security,
    labels,
    pod_security,
    probes,
    resources,
    scrape_annotations,
    shm_volume,
    storage_env_from,
)

PORTS = (("http", HTTP_PORT), ("grpc", GRPC_PORT), ("metrics", METRICS_PORT))


def container(spec: Spec, opts: DeployOptions) -> Manifest:
    env = [
        {"name": "TRITONFORGE_REPOSITORY", "value": opts.repository},
        admin_key_env(opts, optional=True),
    ]
    out: Manifest = {
        "name": "tritonserver",
        "image": opts.image_ref,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in PORTS],
        "env": env,
        "resources": resources(spec, opts),
        "volumeMounts": [SHM_MOUNT],
        "securityContext": container_security(),
        **probes("http"),
    }
    env_from = storage_env_from(opts)
    if env_from:
        out["envFrom"] = env_from
    return out


def deployment(spec: Spec, opts: DeployOptions) -> Manifest:
    pod: Manifest = {
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": 60,
        "containers": [container(spec, opts)],
        "volumes": [shm_volume(spec, opts)],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": opts.name, "labels": labels(opts)},
        "spec": {
            "replicas": opts.min_replicas,
            "selector": {"matchLabels": labels(opts)},
            "template": {
                "metadata": {"labels": labels(opts), "annotations": scrape_annotations()},
                "spec": pod,
            },
        },
    }


def service(opts: DeployOptions) -> Manifest:
    ports = [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in PORTS]
    ports[1]["appProtocol"] = "grpc"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": opts.name, "labels": labels(opts), "annotations": scrape_annotations()},
        "spec": {"type": "ClusterIP", "selector": labels(opts), "ports": ports},
    }


def autoscaler(opts: DeployOptions) -> Manifest:
    """CPU utilisation works with the metrics-server alone; a queue-time metric needs an adapter."""
    target = {"type": "Utilization", "averageUtilization": 80}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": opts.name, "labels": labels(opts)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.name},
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": target}}],
        },
    }


def manifests(spec: Spec, opts: DeployOptions) -> dict[str, Manifest]:
    """File name -> manifest; the spec's LLMs get theirs on the vLLM image (llm.py)."""
    return {
        "deployment.yaml": deployment(spec, opts),
        "service.yaml": service(opts),
        "hpa.yaml": autoscaler(opts),
        **llm.manifests(spec, opts),
    }


def validate(doc: Manifest, version: str = "1.37.0") -> None:
    """kubernetes-validate against the bundled schemas, rejecting unknown fields; then what an
    LLM Deployment needs beyond the schema (llm.check)."""
    import kubernetes_validate  # a dev dependency: imported only when validating

    kubernetes_validate.validate(doc, version, strict=True)
    llm.check(doc)
