"""The layers written in pyproject.toml hold, and each contract fails on a planted violation;
no module imports itself back through others, function-level imports included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT)], cwd=root, env=env, capture_output=True, text=True, timeout=300)


# Every import grimp sees (top-level, function-level and TYPE_CHECKING alike), as cycles
# "a -> b -> ... -> a": the acyclic_siblings contract does not see a package's __init__ and its
# own modules importing each other.
CYCLES = """
import json, grimp
graph = grimp.build_graph("builder", "clients", "openai_frontend", "bench", cache_dir=None)
cycles = set()
for a in graph.modules:
    for b in graph.find_modules_directly_imported_by(a):
        chain = graph.find_shortest_chain(importer=b, imported=a)
        if chain:
            cycles.add(" -> ".join((a, *chain)))
print(json.dumps(sorted(cycles)))
"""


def import_cycles(root: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", CYCLES], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300, check=True)  # fmt: skip
    cycles: list[str] = json.loads(done.stdout)
    return cycles


def test_the_tree_keeps_every_contract() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arch")
    for package in ("builder", "clients", "openai_frontend", "bench"):
        # Links kept: a model's shared modules are links to one file (its contract, in clients/).
        shutil.copytree(
            ROOT / package,
            root / package,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "results"),
        )
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("builder/spec/__init__.py", "import builder.pipeline", "builder layers"),
        ("builder/records.py", "from builder import targets", "builder layers"),
        # The tasks sit below the spec, which composes a checkpoint's entries with them as it loads.
        ("builder/tasks/base.py", "from builder.spec import ModelSpec", "builder layers"),
        ("builder/tasks/text.py", "import builder.data", "builder layers"),
        ("builder/tasks/base.py", "import builder.tasks.text", "no cycles between sibling"),
        ("builder/engines/build.py", "import builder.repository", "builder layers"),
        ("clients/model.py", "import builder.spec", "clients ship alone"),
        ("builder/stages/graph_tensors.py", "from builder.stages import check", "no cycles between sibling"),
        ("clients/errors.py", "import clients.client", "no cycles between sibling"),
        ("clients/generator/core.py", "import clients.generator.aio", "no cycles between sibling"),
        ("clients/tasks.py", "import openai_frontend.engine", "clients ship alone"),
        ("openai_frontend/routes/lookup.py", "import builder.server", "the OpenAI endpoint ships without"),
        ("openai_frontend/engine.py", "import openai_frontend.triton", "openai_frontend layers"),
        ("openai_frontend/triton.py", "from openai_frontend.routes import lookup", "openai_frontend layers"),
        (
            "openai_frontend/routes/lookup.py",
            "from openai_frontend.routes import generate",
            "no cycles between sibling",
        ),
        ("builder/server.py", "import bench.common", "nothing that ships imports the benchmarks"),
        ("clients/perf/report.py", "from bench import figures", "nothing that ships imports the benchmarks"),
        ("openai_frontend/guard.py", "import bench.run", "nothing that ships imports the benchmarks"),
        ("bench/figures.py", "import builder.records", "the docs' figures read results files only"),
        ("bench/common.py", "import bench.run", "no cycles between sibling"),
        (
            "builder/python_models/onnx_runner/model.py",
            "import builder.errors",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/vllm_engine/utils/lanes.py",
            "import builder.llm.serving",
            "Python-backend models import nothing",
        ),
        # The model's contract is a file of clients/ that its package links to: it must import
        # nothing either, or the copy beside model.py would not import in the server.
        ("clients/vllm_engine_contract.py", "import clients.errors", "Python-backend models import nothing"),
        # The other models' contracts: files of builder/python_models/shared/ their packages link to,
        # or a package's own contract.py.
        (
            "builder/python_models/hf_classification/model.py",
            "import builder.tasks.classification",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/shared/onnx_contract.py",
            "import builder.configs",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/shared/processing_contract.py",
            "import builder.spec.checkpoint",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/hf_image_processor/contract.py",
            "import builder.spec.checkpoint",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/shared/image_bytes.py",
            "import builder.data",
            "Python-backend models import nothing",
        ),
        (
            "builder/python_models/image_preprocess/contract.py",
            "import builder.errors",
            "Python-backend models import nothing",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(copy: Path, module: str, planted: str, contract: str) -> None:
    path = copy / module
    original = path.read_text()
    path.write_text(original + f"\n{planted}  # planted\n")
    try:
        result = lint(copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout[-3000:]


def test_no_module_imports_itself_back() -> None:
    assert import_cycles(ROOT) == []


def test_a_planted_cycle_is_found_even_in_a_function(copy: Path) -> None:
    path = copy / "builder" / "spec" / "sequence.py"
    original = path.read_text()
    path.write_text(
        original + "\n\ndef planted() -> None:\n    from builder.spec import ModelSpec  # noqa: F401\n"
    )
    try:
        cycles = import_cycles(copy)
    finally:
        path.write_text(original)
    assert "builder.spec -> builder.spec.sequence -> builder.spec" in cycles, cycles
