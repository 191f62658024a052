"""The KServe CRD schemas the rendered objects are checked against (deploy/crds/).

``python -m builder.deploy.kserve_crd OUT_DIR`` writes one CustomResourceDefinition per kind
from the ``kserve`` package's models (0.21.0: the API objects as the project's pinned SDK
knows them, with the Kubernetes models they embed): every field and its type, and as
``required`` the fields whose setters refuse None. ``check`` validates a manifest against the
shipped file with jsonschema, rejecting unknown fields as ``kubectl --validate=strict`` does.

Shared subtrees are emitted once under ``definitions`` and referenced (``$ref``): inlined,
the InferenceService schema repeats the pod spec for every framework and is tens of MB.
"""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from builder.errors import UserError

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = {  # kind -> (plural, version, root model)
    "InferenceService": ("inferenceservices", "v1beta1", "V1beta1InferenceService"),
    "ServingRuntime": ("servingruntimes", "v1alpha1", "V1alpha1ServingRuntime"),
}
GROUP = "serving.kserve.io"
_LIST = re.compile(r"^[lL]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(|Dict\[)[^,]+, (.+)[)\]]$")
_PRIMITIVE: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "object": {},
    "datetime": {"type": "string"},
    "bytes": {"type": "string"},
    "ResourceQuantity": {"type": ["string", "integer", "number"]},
}


def _model(name: str) -> Any:
    import kserve.models  # the kserve SDK: only where the schema is generated
    import kubernetes.client.models

    # kserve names a few Kubernetes types by their Go package (K8sIoApiAutoscalingV2...)
    k8s_name = re.sub(r"^K8sIoApi[A-Z][a-z]+(V\d)", r"\1", name)
    return getattr(kserve.models, name, None) or getattr(kubernetes.client.models, k8s_name, None)


def _required(klass: Any) -> list[str]:
    """The JSON names of the required fields: pydantic's (the Kubernetes client's models),
    or those whose generated setter refuses None (kserve's own)."""
    if hasattr(klass, "model_fields"):
        keys = klass.attribute_map
        return sorted(keys[a] for a, f in klass.model_fields.items() if a in keys and f.is_required())
    from kserve.configuration import Configuration

    out = []
    for attr, key in klass.attribute_map.items():
        obj = klass.__new__(klass)
        obj.local_vars_configuration = Configuration()
        try:
            setattr(obj, attr, None)
        except ValueError:
            out.append(key)
    return sorted(out)


def _schema(type_name: str, defs: dict[str, Any]) -> dict[str, Any]:
    if m := _LIST.match(type_name):
        return {"type": "array", "items": _schema(m[1], defs)}
    if m := _DICT.match(type_name):
        return {"type": "object", "additionalProperties": _schema(m[1], defs)}
    if type_name in _PRIMITIVE:
        return dict(_PRIMITIVE[type_name])
    if type_name not in defs:
        defs[type_name] = {}  # placeholder: the models are recursive in places
        klass = _model(type_name)
        if klass is None:  # named by a kserve model but not shipped in the SDK: any value
            defs[type_name] = {"description": f"{type_name}: not in the kserve SDK, unchecked"}
            return {"$ref": f"#/definitions/{type_name}"}
        props = {key: _schema(klass.openapi_types[attr], defs) for attr, key in klass.attribute_map.items()}
        body: dict[str, Any] = {"type": "object", "properties": props}
        if req := _required(klass):
            body["required"] = req
        defs[type_name] = body
    return {"$ref": f"#/definitions/{type_name}"}


def crd(kind: str) -> dict[str, Any]:
    plural, version, root = KINDS[kind]
    defs: dict[str, Any] = {}
    top = _schema(root, defs)
    schema = {**top, "definitions": dict(sorted(defs.items()))}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ],
        },
    }


def crd_path(kind: str) -> Path:
    return CRD_DIR / f"{GROUP}_{KINDS[kind][0]}.yaml"


@cache
def _strict_schema(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load(crd_path(kind).read_text(encoding="utf-8"))
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for body in [schema, *schema["definitions"].values()]:
        if "properties" in body:
            body["additionalProperties"] = False
    return schema


def check(doc: dict[str, Any]) -> None:
    """Raise UserError naming the field when ``doc`` breaks its kind's shipped CRD schema."""
    import jsonschema  # type: ignore[import-untyped]  # with kubernetes-validate, a dev dependency

    kind = doc.get("kind")
    if kind not in KINDS or doc.get("apiVersion") != f"{GROUP}/{KINDS[kind][1]}":
        raise UserError(f"no shipped KServe CRD for {doc.get('apiVersion')} {kind}", field="apiVersion/kind")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft7Validator(_strict_schema(kind)).iter_errors(doc)
    )
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path) or "/"
        raise UserError(f"{kind} breaks {crd_path(kind).name}: {error.message[:200]}", field=path)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else CRD_DIR
    out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        header = f"# Generated by `python -m builder.deploy.kserve_crd` from kserve=={_sdk_version()}.\n"
        (out / crd_path(kind).name).write_text(header + json.dumps(crd(kind), indent=1) + "\n")
    return 0


def _sdk_version() -> str:
    from importlib import metadata

    return metadata.version("kserve")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
