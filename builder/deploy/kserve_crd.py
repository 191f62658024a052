"""The KServe CRDs the written objects are checked against, as each release tag ships them.

deploy/crds holds, per KServe release tag, the CRDs of the kinds written here (config/crd/full
of kserve/kserve at that tag), trimmed to what the project writes: descriptions dropped, and
every field the written objects never reach replaced by a marker (its name stays, so an unknown
field is still refused). A release whose trimmed CRD equals an earlier one's points at that
file (deploy/crds/index.yaml, with the upstream blob of each). ``check`` validates an object
against its release's CRD with jsonschema, unknown fields refused as ``kubectl
--validate=strict`` does; an object that reaches a trimmed field is refused too, naming it, so
nothing passes unchecked. CEL rules (``x-kubernetes-validations``) are kept but not evaluated.

The stored files are written by ``python -m builder.deploy.kserve_crd_store SOURCE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from builder.errors import UserError

from .kserve_releases import KServeRelease

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
INDEX = CRD_DIR / "index.yaml"
GROUP = "serving.kserve.io"
TRIMMED = "x-tritonforge-trimmed"
Schema = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    plural: str
    version: str  # the API version written
    upstream: str  # its file under config/crd/full at a tag

    @property
    def file_name(self) -> str:
        return f"{GROUP}_{self.plural}.yaml"


KINDS = {
    "InferenceService": Kind("inferenceservices", "v1beta1", "serving.kserve.io_inferenceservices.yaml"),
    "ServingRuntime": Kind("servingruntimes", "v1alpha1", "serving.kserve.io_servingruntimes.yaml"),
    "LLMInferenceService": Kind(
        "llminferenceservices", "v1alpha1", "llmisvc/serving.kserve.io_llminferenceservices.yaml"
    ),
}


def kinds_of(rel: KServeRelease) -> list[str]:
    return [k for k in KINDS if k != "LLMInferenceService" or rel.has_llm_inference_service]


# Trimming (run where a kserve clone is at hand).


def trim(schema: Schema, values: list[Any]) -> Schema:
    """``schema`` without descriptions, and with each field none of ``values`` holds replaced
    by the marker."""
    out = {k: v for k, v in schema.items() if k not in ("description", "properties", "items")}
    if "properties" in schema:
        out["properties"] = {
            key: _trim_present(sub, [v[key] for v in values if isinstance(v, dict) and key in v])
            for key, sub in schema["properties"].items()
        }
    if "items" in schema:
        out["items"] = _trim_present(schema["items"], [x for v in values if isinstance(v, list) for x in v])
    if isinstance(schema.get("additionalProperties"), dict):
        held = [x for v in values if isinstance(v, dict) for x in v.values()]
        out["additionalProperties"] = _trim_present(schema["additionalProperties"], held)
    return out


def _trim_present(schema: Schema, values: list[Any]) -> Schema:
    return trim(schema, values) if values else {TRIMMED: True}


def trimmed_crd(upstream: Schema, kind: str, docs: list[Any]) -> Schema:
    (version,) = [v for v in upstream["spec"]["versions"] if v["name"] == KINDS[kind].version]
    schema = trim(version["schema"]["openAPIV3Schema"], docs)
    kept = {"name": version["name"], "served": version["served"], "storage": version["storage"]}
    return {
        "apiVersion": upstream["apiVersion"],
        "kind": upstream["kind"],
        "metadata": {"name": upstream["metadata"]["name"]},
        "spec": {
            "group": upstream["spec"]["group"],
            "names": {"kind": kind, "plural": KINDS[kind].plural},
            "scope": upstream["spec"]["scope"],
            "versions": [{**kept, "schema": {"openAPIV3Schema": schema}}],
        },
    }


# Checking.


@cache
def _index() -> dict[str, dict[str, dict[str, str]]]:
    loaded: dict[str, dict[str, dict[str, str]]] = yaml.safe_load(INDEX.read_text(encoding="utf-8"))
    return loaded


def crd_path(kind: str, rel: KServeRelease) -> Path:
    return CRD_DIR / _index()[rel.tag][kind]["file"]


@cache
def _schema(path: Path) -> Schema:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema: Schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    _close(schema)
    return schema


def _close(schema: Any) -> None:
    """Unknown fields refused wherever the CRD lists the fields and keeps no others."""
    if not isinstance(schema, dict):
        return
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    for sub in schema.get("properties", {}).values():
        _close(sub)
    for key in ("items", "additionalProperties"):
        _close(schema.get(key))


def _trimmed(validator: Any, value: Any, instance: Any, schema: Schema) -> Any:
    import jsonschema  # type: ignore[import-untyped]

    if value:
        yield jsonschema.ValidationError(
            "a field trimmed from the stored CRD: run python -m builder.deploy.kserve_crd_store"
        )


def check(doc: Schema, rel: KServeRelease) -> None:
    """Raise UserError naming the field when ``doc`` breaks its kind's CRD at ``rel``."""
    import jsonschema

    kind = doc.get("kind")
    if kind not in kinds_of(rel) or doc.get("apiVersion") != f"{GROUP}/{KINDS[kind].version}":
        raise UserError(
            f"no KServe {rel.tag} CRD for {doc.get('apiVersion')} {kind}", field="apiVersion/kind"
        )
    path = crd_path(kind, rel)
    checker = jsonschema.validators.extend(jsonschema.Draft7Validator, {TRIMMED: _trimmed})
    error = jsonschema.exceptions.best_match(checker(_schema(path)).iter_errors(doc))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "/"
        raise UserError(f"{kind} breaks KServe {rel.tag}'s CRD: {error.message[:200]}", field=where)
