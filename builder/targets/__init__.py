"""The registered targets; ``get(name)`` and ``resolve("auto")`` are how the rest finds one."""

from __future__ import annotations

from collections.abc import Callable

from builder.targets.base import ModelEntry, Target
from builder.targets.cpu import CpuTarget
from builder.targets.gpu import GpuTarget
from builder.targets.local import LocalTarget

__all__ = ["TARGETS", "ModelEntry", "Target", "engine_target", "get", "names", "resolve", "served_here"]

TARGETS: dict[str, Target] = {t.name: t for t in (LocalTarget(), CpuTarget(), GpuTarget())}


def names() -> list[str]:
    return list(TARGETS)


def get(name: str) -> Target:
    """The target called ``name``; ValueError naming the valid ones otherwise."""
    if name not in TARGETS:
        raise ValueError(f"unknown target '{name}' (choose from {', '.join(TARGETS)})")
    return TARGETS[name]


def served_here() -> Target:
    """The target the pip-installed tritonserver loads (what tune and estimate measure on)."""
    return TARGETS["local"]


def engine_target() -> Target:
    """The target whose repositories carry TensorRT plans (what ``tritonforge engines`` builds)."""
    return next(t for t in TARGETS.values() if t.builds_engines)


def resolve(name: str, engines_available: Callable[[], bool]) -> Target:
    """``auto``: the first target that builds engines where they can be built, else the one served here."""
    if name != "auto":
        return get(name)
    if engines_available():
        return engine_target()
    return served_here()
