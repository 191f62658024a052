"""Move the vLLM-backend entries of a built ``gpu`` repository into a repository of their own.

The vLLM image (``Dockerfile`` stage ``vllm``) serves them; the TensorRT image has no vLLM
backend, so with ``--exit-on-error`` an LLM entry left in its repository would stop it.

    python -m builder.deploy.llm_repository SOURCE DEST
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.errors import UserError

VLLM_BACKEND = "vllm"


def vllm_entries(repo: Path) -> list[Path]:
    """Model folders whose config.pbtxt names the vLLM backend, by name."""
    found = []
    for config in sorted(repo.glob("*/config.pbtxt")):
        cfg = text_format.Parse(config.read_text(), ModelConfig())
        if cfg.backend == VLLM_BACKEND:
            found.append(config.parent)
    return found


def move_vllm_entries(source: Path, dest: Path) -> list[str]:
    """Move them from ``source`` to ``dest`` (created, even when empty); return their names."""
    if not source.is_dir():
        raise UserError(f"{source} is not a built repository (no such folder)", field="SOURCE")
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for entry in vllm_entries(source):
        shutil.rmtree(dest / entry.name, ignore_errors=True)
        shutil.move(str(entry), str(dest / entry.name))
        names.append(entry.name)
    return names


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m builder.deploy.llm_repository SOURCE DEST", file=sys.stderr)
        return 2
    try:
        names = move_vllm_entries(Path(argv[0]), Path(argv[1]))
    except UserError as exc:
        print(f"llm_repository: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"vLLM entries moved to {argv[1]}: {', '.join(names) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
