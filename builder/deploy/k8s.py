"""Kubernetes manifests for the tritonforge image: Deployment, Service, HorizontalPodAutoscaler.

Built as plain data and dumped with yaml. The container runs the image's
entrypoint (deploy/entrypoint.sh), which builds stale TensorRT plans for the
GPU it finds and then execs tritonserver with the safe defaults, so the flags
live in one place.
"""

from __future__ import annotations

from builder.spec import Spec

from . import llm, sizing
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
ENGINE_CACHE = "engine-cache"
ENGINE_CACHE_MOUNT = "/opt/tritonforge/engine-cache"  # TRITONFORGE_ENGINE_CACHE: plans, timing cache
ENGINE_CACHE_FLOOR_BYTES = 4 * 1024**3
# Average time a request waits in Triton's queue, per pod, from its own counters (the
# Prometheus adapter rule below); scaling out when requests wait, not when the CPU is busy.
QUEUE_METRIC = "triton_queue_duration_us_per_request"
QUEUE_TARGET_US = 20_000
ADAPTER_RULES = f"""\
rules:
- seriesQuery: 'nv_inference_queue_duration_us{{namespace!="",pod!=""}}'
  resources:
    overrides:
      namespace: {{resource: namespace}}
      pod: {{resource: pod}}
  name:
    as: {QUEUE_METRIC}
  metricsQuery: >-
    sum(rate(nv_inference_queue_duration_us{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>)
    / clamp_min(sum(rate(nv_inference_request_success{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>), 1e-9)
"""


def container(spec: Spec, opts: DeployOptions) -> Manifest:
    env = [
        {"name": "TRITONFORGE_REPOSITORY", "value": opts.repository},
        admin_key_env(opts, optional=True),
    ]
    mounts = [SHM_MOUNT]
    if opts.gpus:  # plans built by an earlier pod on such a GPU are served, not rebuilt
        env.append({"name": "TRITONFORGE_ENGINE_CACHE", "value": ENGINE_CACHE_MOUNT})
        mounts.append({"name": ENGINE_CACHE, "mountPath": ENGINE_CACHE_MOUNT})
    out: Manifest = {
        "name": "tritonserver",
        "image": opts.image_ref,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in PORTS],
        "env": env,
        "resources": resources(spec, opts),
        "volumeMounts": mounts,
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
    if opts.gpus:
        claim = {"claimName": engine_cache_claim(opts)}
        pod["volumes"].append({"name": ENGINE_CACHE, "persistentVolumeClaim": claim})
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


def engine_cache_claim(opts: DeployOptions) -> str:
    return f"{opts.name}-{ENGINE_CACHE}"


def engine_cache(opts: DeployOptions) -> Manifest:
    """The plans and timing cache, shared by every pod: each GPU model and TensorRT version
    gets its own folder in it (``builder.engines.build.engine_root``), so pods on different
    GPUs do not replace each other's plans."""
    size = max(ENGINE_CACHE_FLOOR_BYTES, 4 * sizing.repository_bytes(opts.built_repo))
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": engine_cache_claim(opts), "labels": labels(opts)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": sizing.mebibytes(size)}},
        },
    }


def adapter_rules(opts: DeployOptions) -> Manifest:
    """The Prometheus adapter rule serving :data:`QUEUE_METRIC` (merge it into the adapter's
    configuration; the HPA reads the metric through custom.metrics.k8s.io)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{opts.name}-prometheus-adapter-rules", "labels": labels(opts)},
        "data": {"config.yaml": ADAPTER_RULES},
    }


def autoscaler(opts: DeployOptions) -> Manifest:
    """Scales on the time requests wait in Triton's queue (the Prometheus adapter's custom
    metric), which grows when the GPU is the bottleneck while the CPU may sit idle."""
    target = {"type": "AverageValue", "averageValue": str(QUEUE_TARGET_US)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": opts.name, "labels": labels(opts)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.name},
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": QUEUE_METRIC}, "target": target}}],
        },
    }


def manifests(spec: Spec, opts: DeployOptions) -> dict[str, Manifest]:
    """File name -> manifest; the spec's LLMs get theirs on the vLLM image (llm.py)."""
    return {
        "deployment.yaml": deployment(spec, opts),
        "service.yaml": service(opts),
        "hpa.yaml": autoscaler(opts),
        "prometheus-adapter-rules.yaml": adapter_rules(opts),
        **({"engine-cache-pvc.yaml": engine_cache(opts)} if opts.gpus else {}),
        **llm.manifests(spec, opts),
    }


def validate(doc: Manifest, version: str = "1.37.0") -> None:
    """kubernetes-validate against the bundled schemas, rejecting unknown fields; then what an
    LLM Deployment needs beyond the schema (llm.check)."""
    import kubernetes_validate  # a dev dependency: imported only when validating

    kubernetes_validate.validate(doc, version, strict=True)
    llm.check(doc)
