"""An edit to the code that writes an artifact rebuilds exactly that artifact: the repository
for its writers (a config writer, a target), a stage for its module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.pipeline import build
from builder.records import BuildOptions
from tests.builder.code_edits import CodeEdits

pytestmark = pytest.mark.slow


@pytest.fixture
def edits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CodeEdits]:
    with CodeEdits(monkeypatch) as edits:
        yield edits


def run(project: Path) -> tuple[list[str], bool]:
    """The stages that ran, and whether the repository was published again."""
    lines: list[str] = []
    opts = BuildOptions(project / "models.yaml", project / "repo", target="local", log=lines.append)
    published = build(opts).published
    return [
        line.removeprefix("[tiny] ").removesuffix(" ...") for line in lines if line.endswith(" ...")
    ], published


def test_editing_a_writer_republishes_and_reruns_no_stage(tiny_project: Path, edits: CodeEdits) -> None:
    run(tiny_project)
    assert run(tiny_project) == ([], False)
    for writer in ("builder/configs.py", "builder/targets/local.py", "builder/repository.py"):
        edits.comment(writer)
        assert run(tiny_project) == ([], True), writer


def test_editing_a_stages_module_reruns_that_stage(tiny_project: Path, edits: CodeEdits) -> None:
    run(tiny_project)
    edits.comment("builder/stages/int8.py")
    assert run(tiny_project)[0] == ["int8"]  # the same graph: nothing after it reruns
    edits.comment("builder/stages/int8_ranges.py")
    assert run(tiny_project)[0] == ["int8-ranges", "int8"]  # the same ranges: the same graph
    edits.comment("builder/stages/quantize.py")  # the INT8 stages' helper, and theirs alone
    assert run(tiny_project)[0] == ["int8-ranges", "int8"]
    edits.comment("builder/stages/reference.py")
    reference, *verified = run(tiny_project)[0]  # every verification reads the reference
    # every verification reads the reference, every sizing its inputs, and the INT8 search both
    # (it imports the reference's reader)
    judged = ("verify-", "size-", "int8")
    assert reference == "reference" and verified and all(v.startswith(judged) for v in verified)
    assert "int8-ranges" not in verified
    # The conductor is no stage's code.
    edits.comment("builder/pipeline.py")
    assert run(tiny_project) == ([], False)
