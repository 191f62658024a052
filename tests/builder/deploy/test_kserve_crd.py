"""The KServe CRDs in deploy/crds: each supported release tag's, as KServe ships it (trimmed to
what the project writes), strict, and refusing what reaches a trimmed field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from builder.deploy import kserve_crd
from builder.deploy.kserve_releases import RELEASES, release
from builder.errors import UserError

LATEST = release("0.20")


def test_every_release_has_its_kinds_from_its_tag() -> None:
    index = yaml.safe_load(kserve_crd.INDEX.read_text())
    assert sorted(index) == sorted(r.tag for r in RELEASES.values())
    for rel in RELEASES.values():
        assert sorted(index[rel.tag]) == sorted(kserve_crd.kinds_of(rel))
        for kind, entry in index[rel.tag].items():
            assert entry["upstream"] == f"config/crd/full/{kserve_crd.KINDS[kind].upstream}"
            assert len(entry["upstream_blob"]) == 40
            path = kserve_crd.crd_path(kind, rel)
            header = path.read_text().splitlines()[0]
            tag = path.parent.name  # an earlier tag's file when the trimmed CRD is the same
            assert header.startswith(f"# {kserve_crd.KINDS[kind].upstream} of kserve/kserve at {tag}")
            crd = yaml.safe_load(path.read_text())
            (version,) = crd["spec"]["versions"]
            assert version["name"] == kserve_crd.KINDS[kind].version and version["served"]
            assert (
                "$ref" not in path.read_text() and "definitions" not in version["schema"]["openAPIV3Schema"]
            )


def runtime() -> dict[str, Any]:
    container = {"name": "kserve-container", "image": "tritonforge:0.1.0"}
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"supportedModelFormats": [{"name": "triton"}], "containers": [container]},
    }


def test_a_valid_runtime_passes() -> None:
    kserve_crd.check(runtime(), LATEST)


@pytest.mark.parametrize(
    ("path", "value", "field", "message"),
    [
        (("spec", "containers", 0, "imagePolicy"), "x", "spec.containers.0", "imagePolicy"),  # unknown
        (("spec", "supportedModelFormats", 0, "autoSelect"), "yes", "spec.supportedModelFormats.0.autoSelect",
         "boolean"),
        (("spec", "containers", 0, "name"), None, "spec.containers.0", "name"),  # required
        (("spec", "containers", 0, "stdin"), True, "spec.containers.0.stdin", "trimmed"),  # real, not written
    ],
)  # fmt: skip
def test_defects_name_the_field(path: tuple[Any, ...], value: Any, field: str, message: str) -> None:
    doc = copy.deepcopy(runtime())
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(UserError, match=message) as err:
        kserve_crd.check(doc, LATEST)
    assert err.value.field == field


def test_a_kind_the_release_lacks_is_refused() -> None:
    llm = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {},
        "spec": {},
    }
    with pytest.raises(UserError, match=r"no KServe v0\.15\.2 CRD"):
        kserve_crd.check(llm, release("0.15"))
    with pytest.raises(UserError, match="no KServe"):
        kserve_crd.check({**runtime(), "kind": "InferenceGraph"}, LATEST)


def test_trimming_keeps_every_field_name_and_marks_the_unwritten() -> None:
    schema = {
        "type": "object",
        "description": "d",
        "properties": {"a": {"type": "string"}, "b": {"type": "object"}},
    }
    assert kserve_crd.trim(schema, [{"a": "x"}]) == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {kserve_crd.TRIMMED: True}},
    }
