"""The KServe releases the KServe manifests are written for, and what differs between them.

Each is read from its release tag of kserve/kserve (``--kserve-version``, default the newest):
the deployment-mode value its webhook keeps (0.16 stores ``RawDeployment`` as ``Standard`` and
then refuses an update that still says ``RawDeployment``: ``GetDeploymentMode`` in
pkg/controller/v1beta1/inferenceservice/utils/utils.go and ``validateDeploymentMode`` in
pkg/apis/serving/v1beta1/inference_service_validation.go), whether it has the
LLMInferenceService (v1alpha1, from 0.16), and the router metrics of the
gateway-api-inference-extension its go.mod pins (pkg/epp/metrics/metrics.go at that tag).
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.errors import UserError


@dataclass(frozen=True)
class KServeRelease:
    version: str  # what --kserve-version takes
    tag: str  # the kserve/kserve release tag everything here was read from
    inference_extension: str  # sigs.k8s.io/gateway-api-inference-extension in its go.mod

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def deployment_mode(self) -> str:
        """RawDeployment (a Deployment per component, no Knative) as this release spells it."""
        return "RawDeployment" if self.minor < 16 else "Standard"

    @property
    def has_llm_inference_service(self) -> bool:
        return self.minor >= 16

    @property
    def router_running_metric(self) -> str:
        """The router's gauge of running requests per model (label ``model_name``)."""
        return (
            "inference_model_running_requests" if self.minor < 17 else "inference_objective_running_requests"
        )


ROUTER_QUEUE_METRIC = "inference_pool_average_queue_size"  # label ``name``: the InferencePool
RELEASES = {
    r.version: r
    for r in (
        KServeRelease("0.14", "v0.14.1", ""),
        KServeRelease("0.15", "v0.15.2", ""),
        KServeRelease("0.16", "v0.16.0", "v0.3.0"),
        KServeRelease("0.17", "v0.17.1", "v1.3.0"),
        KServeRelease("0.18", "v0.18.1", "v1.3.1"),
        KServeRelease("0.19", "v0.19.0", "v1.3.1"),
        KServeRelease("0.20", "v0.20.0", "v1.5.0"),
    )
}
DEFAULT_VERSION = "0.20"  # the newest release tag


def release(version: str) -> KServeRelease:
    found = RELEASES.get(".".join(version.removeprefix("v").split(".")[:2]))
    if found is None:
        known = ", ".join(RELEASES)
        raise UserError(f"KServe {version} is not one this writes for ({known})", field="--kserve-version")
    return found
