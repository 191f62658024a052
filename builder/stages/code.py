"""The code that makes a stage's artifact, as a fingerprint for the stage's cache key.

A stage names the modules that make its artifact (``StageInputs.CODE``); the fingerprint hashes
their files and those of every project module they import, at the top or inside a function (read
from the source with ``ast``, nothing imported), with the packages' ``__init__`` files that run on
import. Editing ``builder/stages/quantize.py`` then reruns the INT8 stages and no other; the stages
after it rerun only where the artifact they read changed.

A stage body that lives in an orchestrating module (``builder.pipeline:_int8``) is named as
``module:function``: its source counts, with the module's functions, classes and constants it
uses and the project modules it imports, and not the rest of that module.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

PROJECT = "builder"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding the builder package


def read_source(path: Path) -> bytes:
    return path.read_bytes()


@cache
def code_fingerprint(modules: tuple[str, ...]) -> str:
    """A hash of the files of ``modules`` (or the functions of ``module:function`` names) and of
    every project module they import."""
    digest = hashlib.sha256()
    functions = sorted(name for name in modules if ":" in name)
    imported: list[str] = []
    for ref in functions:
        sources, names = function_closure(ref)
        digest.update(ref.encode())
        digest.update(hashlib.sha256("\n".join(sources).encode()).digest())
        imported += names
    whole = tuple(name for name in modules if ":" not in name)
    for path in sorted(closure(whole) | closure(tuple(imported), whole_package=False)):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(hashlib.sha256(read_source(path)).digest())
    return digest.hexdigest()[:20]


def closure(modules: tuple[str, ...], *, whole_package: bool = True) -> set[Path]:
    """The files of ``modules`` (every module of a package where ``whole_package``) and of the
    project modules they import, transitively."""
    todo = [f for name in modules for f in _files(name, whole_package=whole_package)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            todo += _files(name, whole_package=False)
    return seen


def _files(name: str, *, whole_package: bool) -> list[Path]:
    """The file of module ``name`` and the ``__init__`` files of its packages; a package's
    every module where ``whole_package``; nothing for a name that is not a project module."""
    if name.split(".")[0] != PROJECT:
        return []
    parts = name.split(".")
    inits = [ROOT.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    base = ROOT.joinpath(*parts)
    if base.is_dir():
        own = sorted(base.rglob("*.py")) if whole_package else [base / "__init__.py"]
    elif base.with_suffix(".py").is_file():
        own = [base.with_suffix(".py")]
    else:
        return []
    return [f for f in [*inits, *own] if f.is_file()]


def _imports(path: Path) -> list[str]:
    """The project modules ``path`` imports."""
    return _imports_in(ast.parse(read_source(path), filename=str(path)))


def function_closure(ref: str) -> tuple[list[str], list[str]]:
    """The sources of function ``module:function`` and of the top-level definitions of its module
    that it uses, transitively, and the project modules these import or name."""
    module, _, function = ref.partition(":")
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    text = read_source(path).decode()
    tree = ast.parse(text, filename=str(path))
    definitions = _definitions(tree)
    imported = _imported_names(tree)
    if function not in definitions:
        raise ValueError(f"{ref}: no such function")
    todo, seen, names = [function], set[str](), list[str]()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = definitions[name]
        used = _used_names(node)
        todo += sorted(used & definitions.keys())
        names += [m for n in sorted(used & imported.keys()) for m in imported[n]] + _imports_in(node)
    sources = [ast.get_source_segment(text, definitions[n]) or "" for n in sorted(seen)]
    return sources, names


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """The module's top-level functions, classes and assigned names."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id: node for t in targets if isinstance(t, ast.Name)}
    return found


def _imported_names(tree: ast.Module) -> dict[str, list[str]]:
    """The project modules each name bound by the module's top-level imports stands for."""
    bound: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0]: [a.name] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            bound |= {a.asname or a.name: [node.module, f"{node.module}.{a.name}"] for a in node.names}
    return {name: found for name, found in bound.items() if found[0].split(".")[0] == PROJECT}


def _used_names(node: ast.AST) -> set[str]:
    """The names ``node`` reads, leaving out annotations (never evaluated here)."""
    skipped = {
        id(inside) for inner in ast.walk(node) for part in _annotations(inner) for inside in ast.walk(part)
    }
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in skipped}


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        return [node.returns]
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def _imports_in(node: ast.AST) -> list[str]:
    """The project modules ``node`` imports; ``from a import b`` names both ``a`` and ``a.b``
    (``b`` may be a module or a name in ``a``: a name resolves to no file)."""
    names: list[str] = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Import):
            names += [alias.name for alias in inner.names]
        elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
            names += [inner.module, *(f"{inner.module}.{alias.name}" for alias in inner.names)]
    return [name for name in names if name.split(".")[0] == PROJECT]
