"""A stage's key knows the code that makes it: editing a stage reruns that stage, and only it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.pipeline import build
from builder.records import BuildOptions
from builder.stages import code
from builder.stages.code import ROOT, closure, code_fingerprint, function_closure
from tests.builder.code_edits import CodeEdits


def names(files: set[Path]) -> set[str]:
    return {str(f.relative_to(ROOT)) for f in files}


def test_a_stage_s_code_is_its_module_and_the_project_modules_it_imports() -> None:
    int8 = names(closure(("builder.stages.quantize",)))
    assert {"builder/stages/quantize.py", "builder/stages/check.py", "builder/errors.py"} <= int8
    assert {"builder/__init__.py", "builder/stages/__init__.py"} <= int8  # run on import
    assert "builder/stages/fp16.py" not in int8 and "builder/pipeline.py" not in int8
    assert "builder/stages/quantize.py" not in names(closure(("builder.stages.fp16",)))


def test_imports_inside_functions_count_too() -> None:
    # builder.llm.build imports builder.llm.check only inside the stage body that uses it.
    assert "builder/llm/check.py" in names(closure(("builder.llm.build",)))


def test_a_package_named_as_code_counts_every_module_of_it() -> None:
    every = names(closure(("builder.llm",)))
    assert {"builder/llm/verify.py", "builder/llm/lora.py"} <= every


@pytest.fixture
def edited(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Files whose code the test edits (as read by the fingerprint; the tree is not touched)."""
    files: list[str] = []
    real = code.read_source

    def read(path: Path) -> bytes:
        text = real(path)
        return text + b"\n# edited\n" if str(path.relative_to(ROOT)) in files else text

    monkeypatch.setattr(code, "read_source", read)
    code_fingerprint.cache_clear()
    yield files
    code_fingerprint.cache_clear()


@pytest.mark.slow
def test_editing_a_stage_reruns_that_stage_only(tiny_project: Path, edited: list[str]) -> None:
    def run() -> list[str]:
        lines: list[str] = []
        opts = BuildOptions(
            tiny_project / "models.yaml", tiny_project / "repo", target="local", log=lines.append
        )
        build(opts)
        return [line.removeprefix("[tiny] ").removesuffix(" ...") for line in lines if line.endswith(" ...")]

    run()
    assert run() == []  # nothing edited: every stage skipped
    edited.append("builder/stages/quantize.py")
    code_fingerprint.cache_clear()
    assert run() == ["int8-ranges", "int8"]  # the same artifact: its verification is skipped
    edited[:] = ["builder/stages/fp16.py"]
    code_fingerprint.cache_clear()
    assert run() == ["fp16"]


def test_a_function_named_as_code_counts_what_it_uses_of_its_module_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``builder.llm.build:_check`` is the check stage's body: the GGUF comparison it calls is
    part of it, the verify stage's body beside it is not."""
    with CodeEdits(monkeypatch) as edits:
        before = code_fingerprint(("builder.llm.build:_check",))
        line = "    conversations = load_conversations(prompts, model=spec.name)\n"
        edits.replace("builder/llm/build.py", line, line + "    assert conversations\n")
        assert code_fingerprint(("builder.llm.build:_check",)) == before
        line = "    found = compare(source, checkpoint, spec.widest_dtype)\n"
        edits.replace("builder/llm/build.py", line, line + "    assert found\n")
        assert code_fingerprint(("builder.llm.build:_check",)) != before


def test_a_function_s_imports_count_where_it_uses_them() -> None:
    _, imported = function_closure("builder.llm.build:_check")
    assert {"builder.llm.check", "builder.llm.gguf_check", "builder.sources"} <= set(imported)
    assert "builder.llm.lora" not in imported  # imported by the module, not used by the body
