"""The pod KServe's controller makes from an InferenceService, by KServe's own rules, ported.

Ported from kserve/kserve at its release tags v0.14.1, v0.15.2, v0.16.0 and v0.20.0 (the
rules below are alike at every supported tag unless a function says where they differ):
- pkg/apis/serving/v1beta1/inference_service_defaults.go and predictor_custom.go: the webhook's
  defaulting (``setResourceRequirementDefaults``; ``CustomPredictor.Default``; ``ModelSpec.Default``
  does nothing);
- pkg/controller/v1beta1/inferenceservice/components/predictor.go: ``buildPredictorResources``,
  ``reconcileModel`` (runtime lookup and its checks), ``buildPodSpec``;
- pkg/controller/v1beta1/inferenceservice/utils/utils.go: ``MergeRuntimeContainers`` (strategic
  merge, args concatenated), ``MergePodSpec``, ``UpdateImageTag`` (per tag: see there),
  ``GetDeploymentMode``;
- pkg/utils/container_merge.go at v0.20.0 (``MergeContainerWithPatch``; the same strategic merge
  inline in ``MergeRuntimeContainers`` at the earlier tags);
- pkg/apis/serving/v1beta1/predictor_model.go: ``RuntimeSupportsModel``;
- pkg/apis/serving/v1beta1/inference_service_validation.go: ``validateDeploymentMode``;
- pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go: ``checkHPAExist``.

Strategic merge patch (k8s.io/apimachinery strategicpatch) is ported for what these objects
hold: maps merge key by key, lists with a patchMergeKey in k8s.io/api/core/v1 merge by that key
(base order, new entries appended), other lists and scalars are replaced by the overlay.
"""

from __future__ import annotations

import copy
import re
from typing import Any

Obj = dict[str, Any]
CONTAINER = "kserve-container"
# KServe's chart (inferenceservice-config, "resource"): what the defaulter fills in
CHART_RESOURCE_DEFAULTS = {"cpuRequest": "1", "memoryRequest": "2Gi", "cpuLimit": "1", "memoryLimit": "2Gi"}
# patchMergeKey of the lists in corev1.Container and corev1.PodSpec
MERGE_KEYS = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
}
RUNTIME_POD_FIELDS = (  # what MergePodSpec takes from the runtime's pod spec
    "nodeSelector", "affinity", "tolerations", "volumes", "imagePullSecrets", "schedulerName",
    "resourceClaims",
)  # fmt: skip
# ModelSpec's fields that are not its inline corev1.Container
MODEL_ONLY = ("modelFormat", "runtime", "runtimeVersion", "protocolVersion", "storageUri", "storage")
TAG = re.compile(r"(:([\w.\-_]*))$")
# constants.GetServerTypeFromRuntimeName for KServe's runtimes that UpdateImageTag changes
SERVER_TYPES = {
    "kserve-tensorflow-serving": "tensorflow-serving",
    "kserve-torchserve": "torchserve",
    "kserve-huggingfaceserver": "huggingface",
}


class ResolveError(Exception):
    """Where KServe's controller would refuse the InferenceService."""


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = strategic_merge(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        mk = MERGE_KEYS[key]
        items = copy.deepcopy(base)
        for item in patch:
            at = next((i for i, b in enumerate(items) if b.get(mk) == item.get(mk)), None)
            if at is None:
                items.append(copy.deepcopy(item))
            else:
                items[at] = strategic_merge(items[at], item)
        return items
    return copy.deepcopy(patch)


def set_resource_defaults(resources: Obj, config: dict[str, str] = CHART_RESOURCE_DEFAULTS) -> None:
    """setResourceRequirementDefaults: each of cpu/memory the requests or limits lack."""
    requests = resources.setdefault("requests", {})
    limits = resources.setdefault("limits", {})
    requests.setdefault("cpu", config["cpuRequest"])
    requests.setdefault("memory", config["memoryRequest"])
    limits.setdefault("cpu", config["cpuLimit"])
    limits.setdefault("memory", config["memoryLimit"])


def default(isvc: Obj) -> Obj:
    """The mutating webhook: a custom predictor's first container is named and given resource
    defaults; a model predictor is left as it is."""
    out = copy.deepcopy(isvc)
    predictor = out["spec"]["predictor"]
    if "model" not in predictor:
        containers = predictor.setdefault("containers", [{}])
        if len(containers) == 1 or not containers[0].get("name"):
            containers[0]["name"] = CONTAINER
        set_resource_defaults(containers[0].setdefault("resources", {}))
    return out


def merge_runtime_container(runtime: Obj, isvc: Obj) -> Obj:
    merged: Obj = strategic_merge(runtime, isvc)
    for env in merged.get("env", []):  # reconcileEnvValueConflicts: the overlay's intent wins
        mine = next((e for e in isvc.get("env", []) if e["name"] == env["name"]), None)
        if mine and env.get("value") and env.get("valueFrom"):
            env.pop("value" if "valueFrom" in mine else "valueFrom")
    merged["name"] = merged.get("name") or runtime["name"]
    merged["args"] = [*runtime.get("args", []), *isvc.get("args", [])]
    if not merged["args"]:
        del merged["args"]
    return merged


def update_image_tag(
    container: Obj, runtime_version: str | None, runtime: str, version: str = "v0.20.0"
) -> None:
    """``UpdateImageTag``: v0.14.1 and v0.15.2 replace the tag of a digest too (the digest check
    came with v0.16.0); v0.14.1 gives the "-gpu" suffix to TFServing and TorchServe only, v0.15.2
    on to the Hugging Face server too (v0.20.0 reads the server type from an annotation first,
    which no runtime here has)."""
    image = container.get("image", "")
    if "@sha256:" in image and _minor(version) >= 16:
        return
    if runtime_version is not None:
        container["image"] = (
            TAG.sub(":" + runtime_version, image) if TAG.search(image) else f"{image}:{runtime_version}"
        )
        return
    server = SERVER_TYPES.get(runtime, "")
    if _minor(version) <= 14 and server == "huggingface":
        server = ""
    gpu = "nvidia.com/gpu" in container.get("resources", {}).get("limits", {})
    if server and TAG.search(image) and gpu and not image.endswith("-gpu"):
        container["image"] = image + "-gpu"


def _model_label_set(runtime_spec: Obj) -> set[str]:
    labels = set()
    for f in runtime_spec.get("supportedModelFormats", []):
        labels.add("mt:" + f["name"])
        if "version" in f:
            labels.add(f"mt:{f['name']}:{f['version']}")
    return labels


def _predictor_pod(predictor: Obj) -> Obj:
    skip = {  # PredictorSpec's own fields (ComponentExtensionSpec and the implementations)
        "model", "minReplicas", "maxReplicas", "annotations", "labels", "scaleTarget", "scaleMetric",
        "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher",
        "deploymentStrategy", "autoScaling", "workerSpec", "storageUris",
    }  # fmt: skip
    return {k: copy.deepcopy(v) for k, v in predictor.items() if k not in skip}


def resolve(isvc: Obj, runtimes: dict[str, Obj]) -> Obj:
    """The predictor pod spec for ``isvc`` (as applied, so defaulted first), given the
    (Cluster)ServingRuntimes by name."""
    isvc = default(isvc)
    predictor = isvc["spec"]["predictor"]
    model = predictor.get("model")
    if model is None:  # custom container: the predictor's pod spec as it stands
        return _predictor_pod(predictor)
    name = model.get("runtime")
    if name is None or name not in runtimes:
        raise ResolveError(f"No ServingRuntimes or ClusterServingRuntimes with the name: {name}")
    spec = runtimes[name]["spec"]
    if spec.get("disabled"):
        raise ResolveError(f"specified runtime {name} is disabled")
    protocol = model.get("protocolVersion")
    if protocol and spec.get("protocolVersions") and protocol not in spec["protocolVersions"]:
        raise ResolveError(f"specified runtime {name} does not support specified protocol version")
    fmt = model["modelFormat"]
    label = f"mt:{fmt['name']}" + (f":{fmt['version']}" if "version" in fmt else "")
    if label not in _model_label_set(spec):
        raise ResolveError(f"specified runtime {name} does not support specified framework/version")
    base = next((c for c in spec["containers"] if c["name"] == CONTAINER), None)
    if base is None:
        raise ResolveError(f"failed to find {CONTAINER} in ServingRuntime containers")
    mine = {k: v for k, v in model.items() if k not in MODEL_ONLY}
    container = merge_runtime_container(base, mine)
    update_image_tag(container, model.get("runtimeVersion"), name)
    runtime_pod = {k: spec[k] for k in RUNTIME_POD_FIELDS if k in spec}
    pod: Obj = strategic_merge(runtime_pod, _predictor_pod(predictor))
    assert isinstance(pod, dict)
    pod["containers"] = [container]
    pod["containers"] += [c for c in spec["containers"] if c["name"] != CONTAINER]
    return pod


# KServe's HPA reconciler: what it does to an HPA found at the name it derives.
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
HPA_RECONCILER = "pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go"


def _minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


def kserve_hpa(isvc: Obj) -> Obj:
    """The HPA KServe's autoscaler reconciler builds for a RawDeployment predictor
    (``createHPA``): named like the predictor's Deployment, its component annotations."""
    name = f"{isvc['metadata']['name']}-predictor"  # constants.PredictorServiceName
    annotations = dict(isvc["metadata"].get("annotations", {}))
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    cpu = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    spec = {"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 1, "metrics": [cpu]}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def _owned_by_an_isvc(existing: Obj) -> bool:
    refs = existing.get("metadata", {}).get("ownerReferences", [])
    return any(
        r["apiVersion"].startswith("serving.kserve.io") and r["kind"] == "InferenceService" for r in refs
    )


def _class_changed(desired: Obj, existing: Obj) -> bool:
    mine = desired["metadata"].get("annotations", {}).get(AUTOSCALER_CLASS)
    theirs = existing.get("metadata", {}).get("annotations", {}).get(AUTOSCALER_CLASS)
    return mine != theirs


def hpa_reconcile(version: str, desired: Obj, existing: Obj | None) -> str:
    """``checkHPAExist`` then ``Reconcile`` (HPA_RECONCILER at v0.14.1, v0.15.2, v0.16.0 and
    v0.20.0, alike from v0.16.0 on): "create", "skip", "existed", "update" or "delete"."""
    desired_class = desired["metadata"].get("annotations", {}).get(AUTOSCALER_CLASS)
    if existing is None:
        return "create" if desired_class in (None, "hpa") else "skip"
    equal = desired["spec"] == existing.get("spec") and not _class_changed(desired, existing)
    if _minor(version) <= 14:  # shouldDeleteHPA(desired) only, after the equality check
        if equal:
            return "existed"
        return "delete" if desired_class == "external" else "update"
    delete = _owned_by_an_isvc(existing) and desired_class in ("external", "none")
    if _minor(version) >= 16 and delete:  # v0.16.0 asks before the equality check
        return "delete"
    if equal:
        return "existed"
    return "delete" if delete else "update"


# The deployment mode: what the controller records in the status, and the webhook's check of
# an update against it.
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
CHART_DEFAULT_MODE = {14: "Serverless", 15: "Serverless"}  # inferenceservice-config deploy, 0.16 on: Knative


def recorded_deployment_mode(version: str, annotations: dict[str, str]) -> str:
    """``GetDeploymentMode`` (pkg/controller/v1beta1/inferenceservice/utils/utils.go) on a new
    InferenceService: at v0.14.1 and v0.15.2 RawDeployment, Serverless and ModelMesh are kept and
    any other value gives the chart's default; from v0.16.0 RawDeployment is stored as Standard
    and Serverless as Knative."""
    mode = annotations.get(DEPLOYMENT_MODE)
    if _minor(version) <= 15:
        return mode if mode in ("RawDeployment", "Serverless", "ModelMesh") else "Serverless"
    mode = {"RawDeployment": "Standard", "Serverless": "Knative"}.get(mode or "", mode or "")
    return mode if mode in ("Standard", "Knative", "ModelMesh") else "Knative"


def update_refusal(version: str, status_mode: str, annotations: dict[str, str]) -> str | None:
    """``validateDeploymentMode`` (pkg/apis/serving/v1beta1/inference_service_validation.go at
    v0.14.1 to v0.20.0; v0.20.0 first normalizes the status with ``ParseDeploymentMode``, which
    already holds the normalized value): the webhook's message, or None when it admits it."""
    mode = annotations.get(DEPLOYMENT_MODE)
    if status_mode and mode is not None and mode != status_mode:
        return f"update rejected: deploymentMode cannot be changed from '{status_mode}' to '{mode}'"
    return None
