"""Writes deploy/crds: each supported KServe release's CRDs, trimmed (kserve_crd.py says how).

    python -m builder.deploy.kserve_crd_store SOURCE

SOURCE holds the CRDs as each release tag ships them, ``SOURCE/<tag>/<file name>``, taken
from a clone of kserve/kserve with ``git show <tag>:config/crd/full/<file>`` (the
LLMInferenceService's is under ``llmisvc/``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from builder.spec import load_spec
from builder.spec.llm import LoRA

from .common import DeployOptions
from .kserve import manifests
from .kserve_crd import CRD_DIR, INDEX, KINDS, kinds_of, trimmed_crd
from .kserve_releases import RELEASES, KServeRelease

ZOO = Path(__file__).resolve().parents[2] / "models.yaml"


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def written_objects(rel: KServeRelease) -> dict[str, list[Any]]:
    """What the project writes for ``rel``, by kind, over the options that change its shape: the
    default zoo with and without an object store, with and without GPUs, its LLM with LoRA
    adapters too (the CRDs are trimmed to these)."""
    spec = load_spec(ZOO)
    lora = LoRA(adapters={"adapter": "adapter"})
    with_lora = spec.model_copy(update={"llms": [m.model_copy(update={"lora": lora}) for m in spec.llms]})
    out: dict[str, list[Any]] = {k: [] for k in KINDS}
    for url in (None, "s3://bucket/repo"):
        for gpus in (0, 1):
            opts = DeployOptions(repository_url=url, gpus=gpus, kserve_version=rel.version)
            for one in (spec, with_lora):
                for doc in manifests(one, opts).values():
                    if doc["kind"] in out:
                        out[doc["kind"]].append(doc)
    return out


def store(source: Path, out: Path = CRD_DIR) -> dict[str, dict[str, dict[str, str]]]:
    """Trim each release's CRDs from ``source/<tag>/`` into ``out``; write and return the index."""
    index: dict[str, dict[str, dict[str, str]]] = {}
    stored: dict[str, str] = {}  # trimmed text -> its file
    for rel in RELEASES.values():
        docs = written_objects(rel)
        for kind in kinds_of(rel):
            data = (source / rel.tag / Path(KINDS[kind].upstream).name).read_bytes()
            text = yaml.safe_dump(trimmed_crd(yaml.safe_load(data), kind, docs[kind]), sort_keys=True)
            if text not in stored:
                stored[text] = f"{rel.tag}/{KINDS[kind].file_name}"
                header = (
                    f"# {KINDS[kind].upstream} of kserve/kserve at {rel.tag}, trimmed (kserve_crd_store.py)\n"
                )
                (out / rel.tag).mkdir(parents=True, exist_ok=True)
                (out / stored[text]).write_text(header + text)
            entry = {"file": stored[text], "upstream": f"config/crd/full/{KINDS[kind].upstream}"}
            index.setdefault(rel.tag, {})[kind] = {**entry, "upstream_blob": git_blob(data)}
    INDEX_HEADER = (
        "# The stored CRD of each kind at each KServe release tag (python -m builder.deploy.kserve_crd).\n"
    )
    (out / INDEX.name).write_text(INDEX_HEADER + yaml.safe_dump(index, sort_keys=True))
    return index


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m builder.deploy.kserve_crd_store SOURCE (SOURCE/<tag>/<crd file>)",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(store(Path(argv[0])), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
