"""The CRD schemas in deploy/crds: what the kserve package's models give, and strict."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.deploy import kserve_crd
from builder.errors import UserError

needs_kserve = pytest.mark.skipif(
    importlib.util.find_spec("kserve") is None, reason="kserve is not installed"
)


@needs_kserve
def test_shipped_crds_are_what_the_kserve_package_gives(tmp_path: Path) -> None:
    # in a child process: kserve's gRPC protos clash with tritonclient's in one process
    cmd = [sys.executable, "-m", "builder.deploy.kserve_crd", str(tmp_path)]
    subprocess.run(cmd, check=True, cwd=kserve_crd.CRD_DIR.parents[1], timeout=120)
    for kind in kserve_crd.KINDS:
        shipped = kserve_crd.crd_path(kind)
        assert (tmp_path / shipped.name).read_text() == shipped.read_text(), (
            "run `python -m builder.deploy.kserve_crd`"
        )


def test_required_fields_come_from_the_models() -> None:
    doc = yaml.safe_load(kserve_crd.crd_path("ServingRuntime").read_text())
    defs = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["definitions"]
    assert defs["V1alpha1ServingRuntimeSpec"]["required"] == ["containers"]
    assert defs["V1VolumeMount"]["required"] == ["mountPath", "name"]


def runtime() -> dict[str, Any]:
    container = {"name": "kserve-container", "image": "tritonforge:0.1.0"}
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"supportedModelFormats": [{"name": "triton"}], "containers": [container]},
    }


def test_a_valid_runtime_passes() -> None:
    kserve_crd.check(runtime())


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "containers", 0, "imagePolicy"), "x", "spec.containers.0"),  # unknown field
        (
            ("spec", "supportedModelFormats", 0, "autoSelect"),
            "yes",
            "spec.supportedModelFormats.0.autoSelect",
        ),
        (("spec", "containers"), None, "spec"),  # required
    ],
)
def test_defects_name_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    doc = json.loads(json.dumps(runtime()))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(UserError) as err:
        kserve_crd.check(doc)
    assert err.value.field == field


def test_a_kind_without_a_shipped_crd_is_refused() -> None:
    with pytest.raises(UserError, match="no shipped KServe CRD"):
        kserve_crd.check({**runtime(), "kind": "InferenceGraph"})
