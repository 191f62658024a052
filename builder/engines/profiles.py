"""Optimization profiles from the spec: the same numbers the config is written from.

Each spec profile becomes one TensorRT profile; the batch axis runs from 1 through
the profile's ``opt_batch`` to the model's ``max_batch_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.spec import ModelSpec


@dataclass(frozen=True)
class InputRange:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


ProfileShapes = list[InputRange]


def profile_shapes(model: ModelSpec) -> list[ProfileShapes]:
    """Full shapes (batch axis included when ``max_batch_size > 0``) per profile.

    Empty when every shape is fixed: TensorRT needs no profile then."""
    batched = model.max_batch_size > 0
    if not batched and not any(t.dynamic for t in model.inputs):
        return []
    out = []
    for index in range(max(1, len(model.profiles))):
        ranges = []
        for tensor in model.inputs:
            rng = model.shape_range(tensor, index)
            if batched:
                batch = (1, model.opt_batch(index), model.max_batch_size)
                ranges.append(
                    InputRange(
                        tensor.name,
                        (batch[0], *rng.min),
                        (batch[1], *rng.opt),
                        (batch[2], *rng.max),
                    )
                )
            else:
                ranges.append(InputRange(tensor.name, tuple(rng.min), tuple(rng.opt), tuple(rng.max)))
        out.append(ranges)
    return out


def shapes_arg(shapes: ProfileShapes, which: str) -> str:
    """``trtexec``'s ``--minShapes`` style value: ``input:1x3x224x224,mask:1x8``."""
    return ",".join(f"{r.name}:{'x'.join(map(str, getattr(r, which)))}" for r in shapes)


def triton_profiles(model: ModelSpec) -> list[str]:
    """``instance_group.profile`` for the plan: every profile, so that Triton chooses one by the
    request's shapes. Without the field Triton uses profile 0 only; empty for a single profile."""
    count = len(profile_shapes(model))
    return [str(i) for i in range(count)] if count > 1 else []


def profile_for(shapes: dict[str, tuple[int, ...]], profiles: list[ProfileShapes]) -> int:
    """The profile Triton runs these input shapes with (``GetMostOptimizedProfile`` in its
    TensorRT backend): among the profiles whose min..max hold every shape, the one whose opt
    shapes are nearest (the sum of ``|opt - shape|`` over every dimension of every input),
    the lowest index on a tie. Not the first that fits: with every profile spanning batch
    1..max, the batch size alone decides."""
    if not profiles:
        return 0
    fitting = [
        (_distance(shapes, ranges), index)
        for index, ranges in enumerate(profiles)
        if all(_within(shapes.get(r.name), r) for r in ranges)
    ]
    if fitting:
        return min(fitting)[1]
    held = "; ".join(
        f"{i}: {' '.join(f'{r.name} {list(r.min)}..{list(r.max)}' for r in p)}"
        for i, p in enumerate(profiles)
    )
    raise ValueError(f"input shapes {dict(shapes)} fit no optimization profile ({held})")


def _distance(shapes: dict[str, tuple[int, ...]], ranges: ProfileShapes) -> int:
    return sum(abs(o - s) for r in ranges for o, s in zip(r.opt, shapes[r.name], strict=True))


def opt_batches(profiles: list[ProfileShapes]) -> list[int]:
    """The batch sizes Triton serves each profile at its best: every profile's opt batch."""
    return [ranges[0].opt[0] for ranges in profiles if ranges]


def _within(shape: tuple[int, ...] | None, r: InputRange) -> bool:
    return (
        shape is not None
        and len(shape) == len(r.min)
        and all(lo <= s <= hi for lo, s, hi in zip(r.min, shape, r.max, strict=True))
    )
