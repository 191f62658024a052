"""The three repository targets and what each one serves the core model with."""

from __future__ import annotations

from typing import Literal, get_args

from builder.spec import InstanceKind

Target = Literal["local", "cpu", "gpu"]
TARGETS: tuple[Target, ...] = get_args(Target)


def check_target(value: str) -> Target:
    """Return ``value`` as a Target, or raise ValueError naming the valid ones."""
    if value not in TARGETS:
        raise ValueError(f"unknown target '{value}' (choose from {', '.join(TARGETS)})")
    return value  # type: ignore[return-value]


def instance_kind(kind: InstanceKind, target: Target) -> Literal["KIND_CPU", "KIND_GPU"]:
    """Triton's instance kind: ``auto`` means GPU on the gpu target, CPU elsewhere."""
    if kind is InstanceKind.AUTO:
        kind = InstanceKind.GPU if target == "gpu" else InstanceKind.CPU
    return "KIND_GPU" if kind is InstanceKind.GPU else "KIND_CPU"


def model_filename(target: Target) -> str:
    """The file name the core model's artifact has inside its version folder."""
    return "model.plan" if target == "gpu" else "model.onnx"
