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
