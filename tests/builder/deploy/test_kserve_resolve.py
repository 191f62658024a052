"""The port of KServe's merge rules (kserve_resolve.py) on cases like upstream's own tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builder.deploy.kserve_resolve import (
    ResolveError,
    default,
    merge_runtime_container,
    resolve,
    update_image_tag,
)

RUNTIME: dict[str, Any] = {
    "name": "kserve-container",
    "image": "nvcr.io/nvidia/tritonserver:23.05-py3",
    "args": ["tritonserver", "--model-store=/mnt/models"],
    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    "ports": [{"containerPort": 8080, "name": "h2c"}],
    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
}


def test_env_merges_by_name_and_args_are_concatenated() -> None:
    mine = {"env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}], "args": ["--x=1"]}
    merged = merge_runtime_container(RUNTIME, mine)
    assert merged["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert merged["args"] == ["tritonserver", "--model-store=/mnt/models", "--x=1"]
    assert merged["name"] == "kserve-container"


def test_resources_merge_key_by_key_so_the_runtimes_cpu_limit_stays() -> None:
    merged = merge_runtime_container(
        RUNTIME, {"resources": {"limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}}
    )
    assert merged["resources"]["limits"] == {"cpu": "1", "memory": "8Gi", "nvidia.com/gpu": "1"}


def test_ports_merge_by_container_port_and_the_image_is_replaced() -> None:
    merged = merge_runtime_container(
        RUNTIME, {"image": "tritonforge:0.1.0", "ports": [{"containerPort": 8080, "protocol": "TCP"}]}
    )
    assert merged["ports"] == [{"containerPort": 8080, "name": "h2c", "protocol": "TCP"}]
    assert merged["image"] == "tritonforge:0.1.0"


def test_an_env_value_from_the_predictor_replaces_the_runtimes_value_from() -> None:
    runtime = {**RUNTIME, "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    merged = merge_runtime_container(runtime, {"env": [{"name": "K", "value": "plain"}]})
    assert merged["env"] == [{"name": "K", "value": "plain"}]


@pytest.mark.parametrize(
    ("image", "version", "expected"),
    [
        ("tritonforge:0.1.0", "25.10-py3", "tritonforge:25.10-py3"),
        ("reg.example:5000/tritonforge", "25.10-py3", "reg.example:5000/tritonforge:25.10-py3"),
        ("tritonforge@sha256:ab12", "25.10-py3", "tritonforge@sha256:ab12"),
        ("tritonforge:0.1.0", None, "tritonforge:0.1.0"),
    ],
)
def test_update_image_tag(image: str, version: str | None, expected: str) -> None:
    container = {"image": image}
    update_image_tag(container, version, "tritonforge-triton")
    assert container["image"] == expected


def test_the_defaulter_gives_a_custom_container_one_cpu_when_it_names_no_limit() -> None:
    isvc = {
        "spec": {"predictor": {"containers": [{"image": "x", "resources": {"limits": {"memory": "4Gi"}}}]}}
    }
    (c,) = default(isvc)["spec"]["predictor"]["containers"]
    assert c["name"] == "kserve-container"
    assert c["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "4Gi"},
    }


def test_a_runtime_that_is_missing_or_disabled_is_refused() -> None:
    isvc = {"spec": {"predictor": {"model": {"modelFormat": {"name": "triton"}, "runtime": "rt"}}}}
    with pytest.raises(ResolveError, match="No ServingRuntimes"):
        resolve(isvc, {})
    runtime = {
        "spec": {"disabled": True, "containers": [RUNTIME], "supportedModelFormats": [{"name": "triton"}]}
    }
    with pytest.raises(ResolveError, match="disabled"):
        resolve(isvc, {"rt": runtime})


def test_update_image_tag_follows_the_release() -> None:
    digest = {"image": "tritonforge@sha256:ab12"}
    update_image_tag(digest, "25.10-py3", "tritonforge-triton", version="v0.15.2")
    assert digest["image"] == "tritonforge@sha256:25.10-py3"  # no digest check before v0.16.0
    gpu = {"image": "hf:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    update_image_tag(gpu, None, "kserve-huggingfaceserver", version="v0.14.1")
    assert gpu["image"] == "hf:1"
    update_image_tag(gpu, None, "kserve-huggingfaceserver", version="v0.15.2")
    assert gpu["image"] == "hf:1-gpu"
