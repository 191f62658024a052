"""What the Kubernetes and KServe manifests share: options, names, ports, pod pieces."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.spec import Spec

from . import sizing
from .kserve_releases import DEFAULT_VERSION, KServeRelease, release

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
LIVE_PATH, READY_PATH = "/v2/health/live", "/v2/health/ready"
IMAGE_REPOSITORY = "/opt/tritonforge/model_repository"  # where the Dockerfile puts it
RUN_AS = 10001  # the image's non-root user
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,51}[a-z0-9])?$")
Manifest = dict[str, Any]


def default_image() -> str:
    try:
        return f"tritonforge:{metadata.version('tritonforge')}"
    except metadata.PackageNotFoundError:
        return "tritonforge:0.1.0"


def default_llm_image() -> str:
    """The Dockerfile's ``vllm`` stage, tagged beside the main image."""
    return default_image().replace("tritonforge:", "tritonforge-vllm:", 1)


@dataclass(frozen=True)
class DeployOptions:
    name: str = "tritonforge"
    image: str = ""
    llm_image: str = ""
    repository_url: str | None = None
    gpus: int = 1
    min_replicas: int = 1
    max_replicas: int = 4
    built_repo: Path | None = None  # a built repository to measure for the memory request
    kserve_version: str = DEFAULT_VERSION  # the KServe release the KServe objects are for

    def __post_init__(self) -> None:
        if not DNS_LABEL.match(self.name):
            raise UserError(f"'{self.name}' is not a DNS-1123 label (a-z, 0-9, '-')", field="--name")
        if self.gpus < 0:
            raise UserError(f"{self.gpus} is below 0", field="--gpus")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise UserError("need 1 <= min replicas <= max replicas", field="--max-replicas")
        sizing.check_repository_url(self.repository_url)
        release(self.kserve_version)

    @property
    def kserve(self) -> KServeRelease:
        return release(self.kserve_version)

    @property
    def image_ref(self) -> str:
        return self.image or default_image()

    @property
    def llm_image_ref(self) -> str:
        return self.llm_image or default_llm_image()

    @property
    def repository(self) -> str:
        return self.repository_url or IMAGE_REPOSITORY


def labels(opts: DeployOptions) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tritonforge", "app.kubernetes.io/instance": opts.name}


def scrape_annotations() -> dict[str, str]:
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(METRICS_PORT),
        "prometheus.io/path": "/metrics",
    }


def resources(spec: Spec, opts: DeployOptions) -> Manifest:
    size = sizing.sizing(spec, opts.gpus, opts.built_repo)
    memory = sizing.mebibytes(size.memory_request_bytes)
    res: Manifest = {"requests": {"cpu": "1", "memory": memory}, "limits": {"memory": memory}}
    if opts.gpus:
        res["limits"]["nvidia.com/gpu"] = str(opts.gpus)  # quantities are strings in the API models
    return res


def shm_volume(spec: Spec, opts: DeployOptions) -> Manifest:
    """/dev/shm in memory, sized for the Python-backend instances (see sizing.py)."""
    limit = sizing.mebibytes(sizing.shm_bytes(spec, opts.gpus))
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": limit}}


STARTUP_SECONDS = 1800  # engine builds for every model on a cold GPU node fit in this


def probe(path: str, port: int | str, period: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def probes(port: int | str, startup_seconds: int = STARTUP_SECONDS) -> Manifest:
    """Startup covers the entrypoint's engine build (or an LLM engine's load); after it,
    liveness and readiness take over."""
    return {
        "startupProbe": probe(LIVE_PATH, port, 10, startup_seconds // 10),
        "livenessProbe": probe(LIVE_PATH, port, 10, 3),
        "readinessProbe": probe(READY_PATH, port, 5, 3),
    }


SHM_MOUNT: Manifest = {"name": "dshm", "mountPath": "/dev/shm"}


def admin_key_env(opts: DeployOptions, optional: bool) -> Manifest:
    """The key for the restricted endpoints, from a Secret ``<name>-admin`` (key ``key``)."""
    ref = {"name": f"{opts.name}-admin", "key": "key", "optional": optional}
    return {"name": "TRITON_ADMIN_KEY", "valueFrom": {"secretKeyRef": ref}}


def storage_env_from(opts: DeployOptions) -> list[Manifest]:
    """Object-store credentials (AWS_* or GOOGLE_APPLICATION_CREDENTIALS) from ``<name>-storage``."""
    if opts.repository_url is None:
        return []
    return [{"secretRef": {"name": f"{opts.name}-storage", "optional": True}}]


def pod_security() -> Manifest:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> Manifest:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
