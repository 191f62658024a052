"""A KServe InferenceService serving the repository with Triton.

With an object-store URL the predictor is KServe's Triton runtime
(``modelFormat: triton``, ``kserve-tritonserver``) reading ``storageUri``;
without one it is the tritonforge image itself (repository baked in, plans
built at start). Either way tritonserver gets the same safe defaults as the
container: model control off, restricted endpoints behind a key header.

Built as plain data; ``validate`` checks it against the ``kserve`` package's
models (unknown or misspelt fields, wrong types, missing required fields).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from builder.errors import UserError
from builder.spec import Spec
from builder.spec.llm import LLMSpec

from . import llm
from .common import (
    SHM_MOUNT,
    DeployOptions,
    Manifest,
    admin_key_env,
    container_security,
    labels,
    pod_security,
    probes,
    resources,
    shm_volume,
    storage_env_from,
    triton_release,
)

KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = 8080, 9000  # the ports KServe's Triton runtime uses
RUNTIME = "kserve-tritonserver"
NVIDIA_ENTRYPOINT = "/opt/nvidia/nvidia_entrypoint.sh"  # sets up CUDA compatibility, execs its args
RESTRICTED = "model-repository,shared-memory,trace,logging"
ADMIN_HEADER = "triton-admin-key"


def safety_args() -> list[str]:
    """Added to the runtime's own arguments (KServe appends a model's args to the runtime's
    ``--model-store=/mnt/models`` and ports); $(TRITON_ADMIN_KEY) is expanded by Kubernetes."""
    restricted = f"{RESTRICTED}:{ADMIN_HEADER}=$(TRITON_ADMIN_KEY)"
    return [
        "--model-control-mode=none",
        "--allow-metrics=true",
        f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}",
    ]


def _runtime_model(spec: Spec, opts: DeployOptions) -> Manifest:
    """KServe's Triton runtime; the storage initializer copies storageUri to /mnt/models.

    Pinned to the release the plans are built for (the chart's default, 23.05, has TensorRT
    8.6 and cannot load them), on the tritonforge image built from that release, which has
    the Python-backend models' packages: NVIDIA's entrypoint, then the runtime's own
    ``tritonserver --model-store=/mnt/models`` arguments."""
    model: Manifest = {
        "modelFormat": {"name": "triton"},
        "runtime": RUNTIME,
        "runtimeVersion": triton_release(),
        "image": opts.image_ref,
        "command": [NVIDIA_ENTRYPOINT],
        "protocolVersion": "v2",
        "storageUri": opts.repository_url,
        "args": safety_args(),
        "env": [admin_key_env(opts, optional=False)],
        "resources": resources(spec, opts),
        "volumeMounts": [SHM_MOUNT],
        "securityContext": container_security(),
        **probes(KSERVE_HTTP_PORT),
    }
    env_from = storage_env_from(opts)
    if env_from:
        model["envFrom"] = env_from
    return model


def _image_container(spec: Spec, opts: DeployOptions) -> Manifest:
    """The tritonforge image: its entrypoint adds the safe defaults and passes these on."""
    return {
        "name": "kserve-container",
        "image": opts.image_ref,
        "args": [f"--http-port={KSERVE_HTTP_PORT}", f"--grpc-port={KSERVE_GRPC_PORT}"],
        "ports": [{"name": "http1", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}],
        "env": [admin_key_env(opts, optional=True)],
        "resources": resources(spec, opts),
        "volumeMounts": [SHM_MOUNT],
        "securityContext": container_security(),
        **probes(KSERVE_HTTP_PORT),
    }


def inference_service(spec: Spec, opts: DeployOptions) -> Manifest:
    predictor: Manifest = {
        "minReplicas": opts.min_replicas,
        "maxReplicas": opts.max_replicas,
        "securityContext": pod_security(),
        "volumes": [shm_volume(spec, opts)],
    }
    if opts.repository_url:
        predictor["model"] = _runtime_model(spec, opts)
    else:
        predictor["containers"] = [_image_container(spec, opts)]
    annotations = {"serving.kserve.io/enable-prometheus-scraping": "true"}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": opts.name, "labels": labels(opts), "annotations": annotations},
        "spec": {"predictor": predictor},
    }


def _llm_container(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """The vLLM image loading one LLM (llm.py), on KServe's ports."""
    c = llm.container(one, opts)
    c["name"] = "kserve-container"
    c["args"] = [*c["args"], f"--http-port={KSERVE_HTTP_PORT}", f"--grpc-port={KSERVE_GRPC_PORT}"]
    c["ports"] = [{"name": "http1", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}]
    c.update(probes(KSERVE_HTTP_PORT, llm.STARTUP_SECONDS))
    return c


def llm_inference_service(one: LLMSpec, opts: DeployOptions) -> Manifest:
    """One LLM on the vLLM image, its GPUs, /dev/shm and startup budget as in llm.py."""
    predictor: Manifest = {
        "minReplicas": opts.min_replicas,
        "maxReplicas": opts.max_replicas,
        "securityContext": pod_security(),
        "volumes": [llm.shm_volume(one)],
        "containers": [_llm_container(one, opts)],
    }
    annotations = {"serving.kserve.io/enable-prometheus-scraping": "true"}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": llm.resource_name(opts, one),
            "labels": llm.llm_labels(opts, one),
            "annotations": annotations,
        },
        "spec": {"predictor": predictor},
    }


def manifests(spec: Spec, opts: DeployOptions) -> dict[str, Manifest]:
    out = {"inferenceservice.yaml": inference_service(spec, opts)}
    for one in spec.llms:
        out[f"llm-{one.name}-inferenceservice.yaml"] = llm_inference_service(one, opts)
    return out


# Validation against the kserve package's models.

PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (object,),
    "datetime": (str,),
    "bytes": (str,),
    "ResourceQuantity": (str, int, float),
}
LIST = re.compile(r"^[lL]ist\[(.+)\]$")
DICT = re.compile(r"^(?:dict\(|Dict\[)[^,]+, (.+)[)\]]$")


def validate(doc: Manifest) -> None:
    """Raise UserError naming the field when ``doc`` is not a valid v1beta1 InferenceService.

    The check runs in a child process: importing ``kserve`` registers its own
    ``inference.*`` gRPC messages, which collide with tritonclient's in one process.
    """
    if doc.get("apiVersion") != "serving.kserve.io/v1beta1" or doc.get("kind") != "InferenceService":
        raise UserError("not a serving.kserve.io/v1beta1 InferenceService", field="apiVersion/kind")
    proc = subprocess.run(
        [sys.executable, "-m", "builder.deploy.kserve"],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        llm.check(doc)
        return
    try:
        problem = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise UserError(f"kserve validation failed: {proc.stderr.strip()[-300:]}", field="kserve") from None
    raise UserError(problem["message"], field=problem["field"])


def _validate_here(doc: Manifest) -> None:
    _build(doc, "V1beta1InferenceService", "")


def _model_class(name: str) -> Any:
    import kserve.models  # optional: `pip install kserve==0.21.0`
    import kubernetes.client.models

    klass = getattr(kserve.models, name, None) or getattr(kubernetes.client.models, name, None)
    if klass is None:
        raise UserError(f"unknown model type {name}", field="kserve")
    return klass


def _build(data: Any, type_name: str, path: str) -> Any:
    """Walk ``data`` as ``type_name``: every key known, every type right, then construct the
    model so its own checks (required fields, enums) run."""
    if m := LIST.match(type_name):
        _expect(data, list, path)
        return [_build(v, m[1], f"{path}[{i}]") for i, v in enumerate(data)]
    if m := DICT.match(type_name):
        _expect(data, dict, path)
        return {k: _build(v, m[1], f"{path}.{k}") for k, v in data.items()}
    if type_name in PRIMITIVES:
        bad_bool = isinstance(data, bool) and type_name in ("int", "float")
        if bad_bool or not isinstance(data, PRIMITIVES[type_name]):
            raise UserError(f"expected {type_name}, got {data!r}", field=path or "/")
        return data
    klass = _model_class(type_name)
    _expect(data, dict, path)
    keys = klass.attribute_map
    unknown = sorted(set(data) - set(keys.values()))
    if unknown:
        raise UserError(f"unknown field(s) {unknown} in {type_name}", field=path or "/")
    kwargs = {
        attr: _build(data[key], klass.openapi_types[attr], f"{path}.{key}".lstrip("."))
        for attr, key in keys.items()
        if key in data
    }
    try:
        return klass(**kwargs)
    except ValueError as exc:
        raise UserError(str(exc), field=path or "/") from None


def _expect(data: Any, kind: type, path: str) -> None:
    if not isinstance(data, kind):
        raise UserError(f"expected a {kind.__name__}, got {data!r}", field=path or "/")


if __name__ == "__main__":
    try:
        _validate_here(json.load(sys.stdin))
    except UserError as exc:
        print(json.dumps({"message": exc.message, "field": exc.field}))
        sys.exit(3)
