"""builder.engines.worker: what the build subprocess of each plan keeps out of itself."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

# Polygraphy's own check of an input, as its TrtRunner makes it for every input of every run.
ASK = (
    "import sys, numpy as np; from polygraphy.util import array; {setup}"
    "assert not array.is_torch(np.zeros(1)); print(type(sys.modules.get('torch')).__name__)"
)


def torch_after_polygraphy_asks(setup: str) -> str:
    code = ASK.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_polygraphy_asking_whether_an_input_is_a_torch_tensor_imports_no_torch_in_the_worker() -> None:
    """torch is installed with the project (pyproject.toml pins it), so Polygraphy imports it to
    answer: 1.6 s and hundreds of MB in every plan's process, whose inputs are all NumPy arrays."""
    assert torch_after_polygraphy_asks("") == "module"  # what the worker would pay
    setup = "from builder.engines.worker import keep_torch_out; keep_torch_out(); "
    assert torch_after_polygraphy_asks(setup) == "NoneType"
