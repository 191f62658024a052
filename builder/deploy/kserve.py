"""KServe objects serving the repository on the tritonforge image.

The pod always runs the image the Dockerfile builds (``opts.image_ref``) and its
entrypoint: plans built for the GPU found, then tritonserver with the safe defaults.
Without an object-store URL the predictor is that image as a custom container; with one,
a ServingRuntime of our own carries the image, and the predictor names it with the URL as
``storageUri`` (KServe's storage initializer copies it to /mnt/models). KServe's own
``kserve-tritonserver`` runtime is not used: KServe puts ``runtimeVersion`` in place of the
image's tag and merges the runtime's ``limits.cpu: "1"`` into the pod
(tests/builder/deploy/kserve_resolve.py replays KServe's merge rules on what is written).

Both run as RawDeployment (a Deployment named ``<name>-predictor``; no Knative progress
deadline cutting the plan build short, the startup probe covers it; ``Standard`` from KServe
0.16, ``--kserve-version``), with KServe's autoscaler set to ``external``: an HPA on Triton's
queue time (the Kubernetes path's adapter rule), and for each LLM one on its requests in
flight (LLM_LOAD_METRIC). Plans and the timing cache sit on the engine-cache volume, per GPU
model and TensorRT version, as in k8s.py. From 0.16 each LLM also gets an
LLMInferenceService (kserve_llm.py).

``validate`` checks a KServe object against its kind's CRD at the chosen release, as that tag
ships it (kserve_crd.py); the others with kubernetes-validate.
"""

from __future__ import annotations

import copy

from builder.spec import Spec
from builder.spec.llm import LLMSpec

from . import k8s, kserve_crd, kserve_llm, llm
from .common import (
    IMAGE_REPOSITORY,
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
)

KSERVE_HTTP_PORT = 8080  # the port KServe routes to (Triton's gRPC stays on 8001 for the OpenAI endpoint)
CONTAINER = "kserve-container"  # constants.InferenceServiceContainerName
MODEL_MOUNT = "/mnt/models"  # where KServe's storage initializer puts storageUri
MODEL_FORMAT = {"name": "triton", "version": "2"}
PROTOCOLS = ["v2", "grpc-v2"]
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
WRITABLE_MODELS = {"storage.kserve.io/readonly": "false"}  # plans are published into /mnt/models
# KServe's defaulter gives a custom container without limits.cpu its config's cpuLimit ("1" in
# KServe's chart): one CPU throttles Triton's HTTP threads and the Python-backend stubs.
CPU_LIMIT_FACTOR = 4
# Requests in flight (running or waiting in vLLM's scheduler) per pod, on average over a minute:
# by Little's law the rate of the summed end-to-end latencies. Both vLLM backends export that
# histogram; Triton's own vLLM backend (r25.10 src/utils/metrics.py) has no vllm:num_requests_*
# gauge, and Triton's pending count and queue time stay near zero for it: its execute() hands
# each request to the engine's loop and returns at once (r25.10 src/model.py).
LLM_LOAD_METRIC = "tritonforge_llm_requests_in_flight"
LLM_ADAPTER_RULE = f"""\
- seriesQuery: 'vllm:e2e_request_latency_seconds_sum{{namespace!="",pod!=""}}'
  resources:
    overrides:
      namespace: {{resource: namespace}}
      pod: {{resource: pod}}
  name:
    as: {LLM_LOAD_METRIC}
  metricsQuery: sum(rate(vllm:e2e_request_latency_seconds_sum{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>)
"""


def raw_mode(opts: DeployOptions) -> dict[str, str]:
    """RawDeployment as the release spells it (``Standard`` from 0.16: its webhook refuses an
    update whose mode differs from the one it stored), with the HPA below, not KServe's CPU one."""
    return {DEPLOYMENT_MODE: opts.kserve.deployment_mode, "serving.kserve.io/autoscalerClass": "external"}


def predictor_deployment(isvc_name: str) -> str:
    """The Deployment KServe makes for the predictor in RawDeployment mode
    (constants.PredictorServiceName)."""
    return f"{isvc_name}-predictor"


def hpa_name(isvc_name: str) -> str:
    """Apart from ``<isvc>-predictor``, the name KServe gives its own HPA: its reconciler takes
    an HPA found there for its own (overwrites it with its CPU spec on 0.15 to 0.20, deletes it
    on 0.14)."""
    return f"{isvc_name}-scaler"


def runtime_name(opts: DeployOptions) -> str:
    return f"{opts.name}-triton"


def with_cpu_limit(res: Manifest) -> Manifest:
    out = copy.deepcopy(res)
    cpu = int(out["requests"]["cpu"])
    out["limits"]["cpu"] = str(cpu * CPU_LIMIT_FACTOR)
    return out


def _triton_container(spec: Spec, opts: DeployOptions, repository: str) -> Manifest:
    """The tritonforge image on KServe's port: no command (the image's entrypoint builds the
    plans, then execs tritonserver with the safe defaults and these arguments)."""
    env = [{"name": "TRITONFORGE_REPOSITORY", "value": repository}, admin_key_env(opts, optional=True)]
    mounts = [SHM_MOUNT]
    if opts.gpus:  # plans built by an earlier pod on such a GPU are served, not rebuilt
        env.append({"name": "TRITONFORGE_ENGINE_CACHE", "value": k8s.ENGINE_CACHE_MOUNT})
        mounts.append({"name": k8s.ENGINE_CACHE, "mountPath": k8s.ENGINE_CACHE_MOUNT})
    return {
        "name": CONTAINER,
        "image": opts.image_ref,
        "args": [f"--http-port={KSERVE_HTTP_PORT}"],
        "ports": [{"name": "http1", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}],
        "env": env,
        "resources": with_cpu_limit(resources(spec, opts)),
        "volumeMounts": mounts,
        "securityContext": container_security(),
        **probes(KSERVE_HTTP_PORT),
    }


def _pod_volumes(spec: Spec, opts: DeployOptions) -> list[Manifest]:
    volumes = [shm_volume(spec, opts)]
    if opts.gpus:
        claim = {"claimName": k8s.engine_cache_claim(opts)}
        volumes.append({"name": k8s.ENGINE_CACHE, "persistentVolumeClaim": claim})
    return volumes


def serving_runtime(spec: Spec, opts: DeployOptions) -> Manifest:
    """The runtime for an object-store repository: the tritonforge image reading /mnt/models.
    Not auto-selected: only the InferenceService that names it lands on it."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": runtime_name(opts), "labels": labels(opts)},
        "spec": {
            "supportedModelFormats": [{**MODEL_FORMAT, "autoSelect": False}],
            "protocolVersions": PROTOCOLS,
            "containers": [_triton_container(spec, opts, MODEL_MOUNT)],
            "volumes": _pod_volumes(spec, opts),
        },
    }


def inference_service(spec: Spec, opts: DeployOptions) -> Manifest:
    predictor: Manifest = {
        "minReplicas": opts.min_replicas,
        "maxReplicas": opts.max_replicas,
        "annotations": scrape_annotations(),
        "securityContext": pod_security(),
    }
    annotations = raw_mode(opts)
    if opts.repository_url:
        predictor["model"] = {
            "modelFormat": {"name": MODEL_FORMAT["name"]},
            "runtime": runtime_name(opts),
            "protocolVersion": "v2",
            "storageUri": opts.repository_url,
        }
        annotations.update(WRITABLE_MODELS)
    else:
        predictor["containers"] = [_triton_container(spec, opts, IMAGE_REPOSITORY)]
        predictor["volumes"] = _pod_volumes(spec, opts)
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": opts.name, "labels": labels(opts), "annotations": annotations},
        "spec": {"predictor": predictor},
    }


def _llm_container(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """The vLLM image loading one LLM (llm.py), on KServe's port."""
    c = llm.container(one, opts)
    c["name"] = CONTAINER
    c["args"] = [*c["args"], f"--http-port={KSERVE_HTTP_PORT}"]
    c["ports"] = [{"name": "http1", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}]
    c["resources"] = with_cpu_limit(c["resources"])
    c.update(probes(KSERVE_HTTP_PORT, llm.STARTUP_SECONDS))
    return c


def llm_inference_service(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """One LLM on the vLLM image, its GPUs, /dev/shm and startup budget as in llm.py."""
    predictor: Manifest = {
        "minReplicas": opts.min_replicas,
        "maxReplicas": opts.max_replicas,
        "annotations": scrape_annotations(),
        "securityContext": pod_security(),
        "volumes": [llm.shm_volume(one)],
        "containers": [_llm_container(one, opts)],
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": llm.resource_name(opts, one),
            "labels": llm.llm_labels(opts, one),
            "annotations": raw_mode(opts),
        },
        "spec": {"predictor": predictor},
    }


def autoscaler(opts: DeployOptions) -> Manifest:
    """k8s.py's HPA on Triton's queue time, aimed at the predictor's Deployment."""
    hpa = k8s.autoscaler(opts)
    hpa["metadata"]["name"] = hpa_name(opts.name)
    hpa["spec"]["scaleTargetRef"]["name"] = predictor_deployment(opts.name)
    return hpa


def llm_autoscaler(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """Scales one LLM when its pods hold, on average, more requests than the engine's running
    slots (``max_num_seqs``): beyond them, requests wait in vLLM's scheduler."""
    name = llm.resource_name(opts, one)
    slots = one.gpu_max_num_seqs
    target = {"type": "AverageValue", "averageValue": str(slots)}
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": predictor_deployment(name)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": hpa_name(name), "labels": llm.llm_labels(opts, one)},
        "spec": {
            "scaleTargetRef": ref,
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": LLM_LOAD_METRIC}, "target": target}}],
        },
    }


def adapter_rules(spec: Spec, opts: DeployOptions) -> Manifest:
    """k8s.py's Prometheus adapter rules, plus the LLMs' requests in flight when the spec has LLMs."""
    rules = k8s.adapter_rules(opts)
    if spec.llms:
        rules["data"]["config.yaml"] += LLM_ADAPTER_RULE
        if opts.kserve.has_llm_inference_service:
            rules["data"]["config.yaml"] += kserve_llm.adapter_rules(opts.kserve)
    return rules


def manifests(spec: Spec, opts: DeployOptions) -> dict[str, Manifest]:
    out = {"inferenceservice.yaml": inference_service(spec, opts)}
    if opts.repository_url:
        out["servingruntime.yaml"] = serving_runtime(spec, opts)
    # the same claim as the Kubernetes path's (its file, written alike): the plans on GPUs, and
    # without a repository URL the LLMInferenceServices' checkpoints
    llm_checkpoints = spec.llms and not opts.repository_url and opts.kserve.has_llm_inference_service
    if opts.gpus or llm_checkpoints:
        out["engine-cache-pvc.yaml"] = k8s.engine_cache(opts)
    # named apart from k8s.py's files: both are written into deploy/generated
    out["kserve-hpa.yaml"] = autoscaler(opts)
    out["kserve-prometheus-adapter-rules.yaml"] = adapter_rules(spec, opts)
    for one in spec.llms:
        out[f"llm-{one.name}-inferenceservice.yaml"] = llm_inference_service(one, opts)
        out[f"llm-{one.name}-kserve-hpa.yaml"] = llm_autoscaler(one, opts)
        out.update(kserve_llm.manifests(one, opts))
    return out


def validate(doc: Manifest, opts: DeployOptions | None = None) -> None:
    """Raise UserError naming the field when ``doc`` is not a valid object of its kind: a
    KServe one against its CRD at the release ``opts`` names (as that tag ships it, trimmed:
    kserve_crd.py), any other with kubernetes-validate --strict; then llm.check and
    kserve_llm.check."""
    rel = (opts or DeployOptions()).kserve
    if not str(doc.get("apiVersion", "")).startswith("serving.kserve.io/"):
        k8s.validate(doc)
        return
    kserve_crd.check(doc, rel)
    llm.check(doc)
    kserve_llm.check(doc)
