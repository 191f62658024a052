"""Kubernetes manifests for the spec's LLMs on the vLLM image (Dockerfile stage ``vllm``).

One Deployment and one Service per ``llms:`` entry: each engine takes its own
``gpu.tensor_parallel_size`` GPUs (two vLLM engines on one GPU would each reserve
``gpu_memory_utilization`` of it). The image holds every LLM entry; the container loads its
own only (``--model-control-mode=explicit``, after the entrypoint's ``none``: tritonserver
takes the last value). The repository is always the image's: model.json names the
checkpoint by its path there, which a repository fetched from an object store would not have.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from builder.errors import UserError
from builder.llm.memory import ModelSizes
from builder.spec import Spec
from builder.spec.llm import LLMSpec
from openai_frontend import API_KEY_ENV
from openai_frontend import DEFAULT_PORT as OPENAI_PORT

from . import sizing
from .common import (
    DNS_LABEL,
    GRPC_PORT,
    HTTP_PORT,
    IMAGE_REPOSITORY,
    METRICS_PORT,
    SHM_MOUNT,
    DeployOptions,
    Manifest,
    admin_key_env,
    container_security,
    pod_security,
    probes,
    scrape_annotations,
)

PORTS = (("http", HTTP_PORT), ("grpc", GRPC_PORT), ("metrics", METRICS_PORT), ("openai", OPENAI_PORT))
# Loading the weights, profiling the KV space and capturing CUDA graphs takes minutes on a
# large model; the server listens only once its models are loaded.
STARTUP_SECONDS = 1800
# vLLM's tensor-parallel workers exchange through /dev/shm (NCCL's shared-memory transport,
# vLLM's broadcast queues; its docs ask for --ipc=host or a large --shm-size), and the
# backend's Python stub passes every request and response through it too.
SHM_PER_GPU_BYTES = 1024 * sizing.MIB
LLM_COMPONENT = ("app.kubernetes.io/component", "llm")


def resource_name(opts: DeployOptions, llm: LLMSpec) -> str:
    name = f"{opts.name}-{llm.name.lower().replace('_', '-')}"
    if not DNS_LABEL.match(name):
        raise UserError(f"'{name}' is not a DNS-1123 label (a-z, 0-9, '-', at most 53)",
                        model=llm.name, field="name")  # fmt: skip
    return name


def llm_labels(opts: DeployOptions, llm: LLMSpec) -> dict[str, str]:
    """Apart from the main Deployment's, so that its Service never selects an LLM pod."""
    return {
        "app.kubernetes.io/name": "tritonforge",
        "app.kubernetes.io/instance": resource_name(opts, llm),
        LLM_COMPONENT[0]: LLM_COMPONENT[1],
    }


def shm_bytes(llm: LLMSpec) -> int:
    return max(sizing.SHM_FLOOR_BYTES, SHM_PER_GPU_BYTES * llm.gpu.tensor_parallel_size)


def shm_volume(llm: LLMSpec) -> Manifest:
    shm = {"medium": "Memory", "sizeLimit": sizing.mebibytes(shm_bytes(llm))}
    return {"name": SHM_MOUNT["name"], "emptyDir": shm}


def weights_bytes(llm: LLMSpec, built_repo: Path | None) -> int:
    """Weights at the GPU dtype, from the built checkpoint's config.json (0 when not built here).
    vLLM reads them through host memory on the way to the GPUs."""
    if built_repo is None:
        return 0
    # Here, not at the top: builder.llm.gpu loads tritonclient's protos, which clash with
    # kserve's in the child process that validates an InferenceService (kserve.py).
    from builder.llm.gpu import CHECKPOINT_DIR

    config = built_repo / llm.name / "1" / CHECKPOINT_DIR / "config.json"
    if not config.is_file():
        return 0
    return ModelSizes.from_checkpoint(config.parent).parameters * llm.gpu.dtype.bytes


def resources(llm: LLMSpec, opts: DeployOptions) -> Manifest:
    memory_bytes = sizing.BASE_MEMORY_BYTES + shm_bytes(llm) + weights_bytes(llm, opts.built_repo)
    memory = sizing.mebibytes(memory_bytes)
    gpus = str(llm.gpu.tensor_parallel_size)  # quantities are strings in the API models
    cpus = str(max(2, llm.gpu.tensor_parallel_size + 1))  # a process per rank plus the server
    return {
        "requests": {"cpu": cpus, "memory": memory},
        "limits": {"memory": memory, "nvidia.com/gpu": gpus},
    }


def container(llm: LLMSpec, opts: DeployOptions) -> Manifest:
    return {
        "name": "tritonserver",
        "image": opts.llm_image_ref,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--model-control-mode=explicit", f"--load-model={llm.name}"],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in PORTS],
        "env": [
            {"name": "TRITONFORGE_REPOSITORY", "value": IMAGE_REPOSITORY},
            admin_key_env(opts, optional=True),
            openai_key_env(opts),
        ],
        "resources": resources(llm, opts),
        "volumeMounts": [SHM_MOUNT],
        "securityContext": container_security(),
        **probes("http", STARTUP_SECONDS),
    }


def openai_key_env(opts: DeployOptions) -> Manifest:
    """The OpenAI endpoint's key, from a Secret ``<name>-openai`` (key ``key``); none without it."""
    ref = {"name": f"{opts.name}-openai", "key": "key", "optional": True}
    return {"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


def deployment(llm: LLMSpec, opts: DeployOptions) -> Manifest:
    name = resource_name(opts, llm)
    pod: Manifest = {
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": 60,
        "containers": [container(llm, opts)],
        "volumes": [shm_volume(llm)],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": llm_labels(opts, llm)},
        "spec": {
            "replicas": opts.min_replicas,
            "selector": {"matchLabels": llm_labels(opts, llm)},
            "template": {
                "metadata": {"labels": llm_labels(opts, llm), "annotations": scrape_annotations()},
                "spec": pod,
            },
        },
    }


def service(llm: LLMSpec, opts: DeployOptions) -> Manifest:
    ports = [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in PORTS]
    ports[1]["appProtocol"] = "grpc"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": resource_name(opts, llm),
            "labels": llm_labels(opts, llm),
            "annotations": scrape_annotations(),
        },
        "spec": {"type": "ClusterIP", "selector": llm_labels(opts, llm), "ports": ports},
    }


def manifests(spec: Spec, opts: DeployOptions) -> dict[str, Manifest]:
    """File name -> manifest, two per LLM (none when the spec has no ``llms:``)."""
    out: dict[str, Manifest] = {}
    for llm in spec.llms:
        out[f"llm-{llm.name}-deployment.yaml"] = deployment(llm, opts)
        out[f"llm-{llm.name}-service.yaml"] = service(llm, opts)
    return out


def _fail(doc: Manifest, what: str, field: str) -> NoReturn:
    raise UserError(f"{doc['kind']} {doc['metadata']['name']}: {what}", field=field)


def _pod(doc: Manifest) -> Manifest | None:
    """The pod spec of an LLM Deployment or InferenceService; None for any other manifest."""
    if doc.get("metadata", {}).get("labels", {}).get(LLM_COMPONENT[0]) != LLM_COMPONENT[1]:
        return None
    if doc.get("kind") == "Deployment":
        pod: Manifest = doc["spec"]["template"]["spec"]
        return pod
    if doc.get("kind") == "InferenceService":
        predictor: Manifest = doc["spec"]["predictor"]
        return predictor
    return None


def check(doc: Manifest) -> None:
    """What the schema cannot see in an LLM Deployment or InferenceService: a GPU limit,
    /dev/shm in memory with a size, and a startup budget for the engine's load."""
    pod = _pod(doc)
    if pod is None:
        return
    c = pod["containers"][0]
    if int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0")) < 1:
        _fail(doc, "no nvidia.com/gpu limit: the vLLM engine needs a GPU", "resources.limits")
    mount = next((m for m in c.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"), None)
    if mount is None:
        _fail(doc, "/dev/shm is not mounted (the default 64 MiB stops vLLM's workers)", "volumeMounts")
    volume: Manifest = next((v for v in pod.get("volumes", []) if v.get("name") == mount["name"]), {})
    empty = volume.get("emptyDir", {})
    if empty.get("medium") != "Memory" or "sizeLimit" not in empty:
        _fail(doc, "/dev/shm is not a memory-backed emptyDir with a sizeLimit", "volumes")
    probe = c.get("startupProbe")
    budget = 0 if probe is None else probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    if budget < STARTUP_SECONDS:
        _fail(
            doc,
            f"startup budget {budget} s is below {STARTUP_SECONDS} s for the engine's load",
            "startupProbe",
        )
