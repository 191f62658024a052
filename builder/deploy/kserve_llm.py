"""KServe LLMInferenceService (serving.kserve.io/v1alpha1, KServe 0.16 on) for each ``llms:`` entry.

vLLM's own server, in the image KServe's ``kserve-config-llm-template`` names, behind KServe's
router (its Gateway API route and the inference scheduler that picks a pod by KV cache and
queue): for LLMs that outgrow one pod. The model is the checkpoint the ``gpu`` build verified,
at ``<repository-url>/<llm>/1/checkpoint`` (the repository's layout) or, without a repository
URL, at ``llm/<llm>/1/checkpoint`` on the engine-cache claim; KServe's storage initializer puts
it at /mnt/models, which the template serves. The engine settings are the gpu entry's
model.json (``builder.llm.gpu.gpu_engine_args``) as vLLM flags, the sampling defaults its
``--override-generation-config``, the LoRA adapters ``--lora-modules`` from /mnt/lora (an init
container running KServe's storage initializer fetches them; a claim is mounted). The args
name the served model and port too: on 0.16 the template's args are replaced, not added to.

Scaling: no ``replicas`` (the Deployment KServe makes, ``<name>-kserve``, is the HPA's) and an
HPA on the router's own gauges, never GPU utilisation: the pool's average queue per pod and the
requests running per model (their names per release in kserve_releases.py).
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

from builder.errors import UserError
from builder.llm.gpu import CHECKPOINT_DIR, gpu_engine_args
from builder.llm.serving import LORA_DIR, model_json
from builder.spec.llm import LLMSpec

from . import k8s, llm
from .common import DeployOptions, Manifest
from .kserve_releases import ROUTER_QUEUE_METRIC, KServeRelease

API_VERSION = "serving.kserve.io/v1alpha1"
MAIN = "main"  # the template's vLLM container
VLLM_PORT = 8000
LLM_FOLDER = "llm"  # on the engine-cache claim: the LLM entries of a gpu build
LORA_MOUNT = PurePosixPath("/mnt/lora")
STORAGE_INITIALIZER = "kserve/storage-initializer"
NOT_FLAGS = ("model", "disable_log_stats")  # the template's model path; vLLM's default
QUEUE_METRIC = "tritonforge_router_queue_size"
RUNNING_METRIC = "tritonforge_router_running_requests"
QUEUE_TARGET = 2  # requests waiting per pod, on average, before another pod starts


def workload(name: str) -> str:
    """The Deployment KServe makes for an LLMInferenceService (``kmeta.ChildName(name, "-kserve")``)."""
    return f"{name}-kserve"


def pool(name: str) -> str:
    """Its InferencePool, the router's ``name`` label."""
    return f"{name}-inference-pool"


def entry_uri(one: LLMSpec, opts: DeployOptions) -> str:
    """The model's version folder in the published repository, or on the engine-cache claim."""
    if opts.repository_url:
        return f"{opts.repository_url.rstrip('/')}/{one.name}/1"
    return f"pvc://{k8s.engine_cache_claim(opts)}/{LLM_FOLDER}/{one.name}/1"


def vllm_flags(one: LLMSpec) -> list[str]:
    """The gpu entry's engine arguments as ``vllm serve`` flags, then the sampling defaults."""
    flags: list[str] = ["--served-model-name", one.name, "--port", str(VLLM_PORT)]
    for key, value in model_json(gpu_engine_args(one)).items():
        if key in NOT_FLAGS:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else flag.replace("--", "--no-", 1))
        else:
            flags += [flag, str(value)]
    defaults = {"temperature": one.sampling.temperature, "top_p": one.sampling.top_p,
                "max_new_tokens": one.sampling.max_tokens}  # fmt: skip
    flags += ["--override-generation-config", json.dumps(defaults)]
    if one.lora is not None:
        flags += ["--lora-modules", *(f"{a}={LORA_MOUNT / a}" for a in sorted(one.lora.adapters))]
    return flags


def _lora_pieces(one: LLMSpec, opts: DeployOptions, rel: KServeRelease) -> Manifest:
    """The adapters at /mnt/lora: fetched by KServe's storage initializer from the object
    store, or the claim's folder mounted."""
    if one.lora is None:
        return {}
    mount = {"name": "lora", "mountPath": str(LORA_MOUNT), "readOnly": True}
    if not opts.repository_url:
        claim = {"claimName": k8s.engine_cache_claim(opts), "readOnly": True}
        mount["subPath"] = f"{LLM_FOLDER}/{one.name}/1/{LORA_DIR}"
        return {"mount": mount, "volume": {"name": "lora", "persistentVolumeClaim": claim}}
    pairs = [
        x
        for a in sorted(one.lora.adapters)
        for x in (f"{entry_uri(one, opts)}/{LORA_DIR}/{a}", str(LORA_MOUNT / a))
    ]
    init = {
        "name": "lora-adapters",
        "image": f"{STORAGE_INITIALIZER}:{rel.tag}",
        "args": pairs,
        "envFrom": [{"secretRef": {"name": f"{opts.name}-storage", "optional": True}}],
        "volumeMounts": [{"name": "lora", "mountPath": str(LORA_MOUNT)}],
    }
    return {"mount": {**mount, "readOnly": False}, "volume": {"name": "lora", "emptyDir": {}}, "init": init}


def llm_inference_service(one: LLMSpec, opts: DeployOptions) -> Manifest:
    rel = opts.kserve
    name = llm.resource_name(opts, one)
    main: Manifest = {"name": MAIN, "args": vllm_flags(one), "resources": llm.resources(one, opts)}
    template: Manifest = {"containers": [main], "volumes": [llm.shm_volume(one)]}
    lora = _lora_pieces(one, opts, rel)
    if lora:
        main["volumeMounts"] = [lora["mount"]]
        template["volumes"].append(lora["volume"])
        if "init" in lora:
            template["initContainers"] = [lora["init"]]
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMInferenceService",
        "metadata": {"name": name, "labels": llm.llm_labels(opts, one)},
        "spec": {
            "model": {"uri": f"{entry_uri(one, opts)}/{CHECKPOINT_DIR}", "name": one.name},
            "router": {"route": {}, "gateway": {}, "scheduler": {}},
            "template": template,
        },
    }


def autoscaler(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """Scales the LLM's Deployment on the router's queue per pod and running requests."""
    name = llm.resource_name(opts, one)
    slots = one.gpu_max_num_seqs
    queue = {"metric": {"name": QUEUE_METRIC, "selector": {"matchLabels": {"name": pool(name)}}},
             "target": {"type": "Value", "value": str(QUEUE_TARGET)}}  # fmt: skip
    running = {"metric": {"name": RUNNING_METRIC, "selector": {"matchLabels": {"model_name": one.name}}},
               "target": {"type": "AverageValue", "averageValue": str(slots)}}  # fmt: skip
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{name}-router-scaler", "labels": llm.llm_labels(opts, one)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload(name)},
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": [{"type": "External", "external": queue}, {"type": "External", "external": running}],
        },
    }


def adapter_rules(rel: KServeRelease) -> str:
    """Prometheus adapter ``externalRules`` serving the router's gauges under stable names."""
    rules = ""
    for series, name, agg, by in (
        (ROUTER_QUEUE_METRIC, QUEUE_METRIC, "max", "name"),
        (rel.router_running_metric, RUNNING_METRIC, "sum", "model_name"),
    ):
        rules += (
            f"- seriesQuery: '{series}{{namespace!=\"\"}}'\n"
            "  resources:\n    overrides:\n      namespace: {resource: namespace}\n"
            f"  name:\n    as: {name}\n"
            f"  metricsQuery: {agg}({series}{{<<.LabelMatchers>>}}) by ({by})\n"
        )
    return "externalRules:\n" + rules


def check(doc: Manifest) -> None:
    """What the CRD cannot see: a GPU limit on vLLM's container."""
    if doc.get("kind") != "LLMInferenceService":
        return
    containers: list[Manifest] = doc["spec"].get("template", {}).get("containers", [])
    main: Manifest = next((c for c in containers if c.get("name") == MAIN), {})
    if int(main.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0")) < 1:
        raise UserError(f"LLMInferenceService {doc['metadata']['name']}: no nvidia.com/gpu limit on '{MAIN}'",
                        field="spec.template.containers")  # fmt: skip


def manifests(one: LLMSpec, opts: DeployOptions) -> dict[str, Manifest]:
    if not opts.kserve.has_llm_inference_service:
        return {}
    return {
        f"llm-{one.name}-llminferenceservice.yaml": llm_inference_service(one, opts),
        f"llm-{one.name}-router-hpa.yaml": autoscaler(one, opts),
    }
