"""Optimization profiles from the spec: the same numbers the config is written from.

Each spec profile becomes one TensorRT profile; the batch axis runs from 1 through
the profile's ``opt_batch`` to the model's ``max_batch_size``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    batched = model.batched
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


# Triton's choice of profile, ported line by line from triton-inference-server/tensorrt_backend,
# src/instance_state.cc at commit 6871856e2a1776c221770200a6eb424b303a6612:
# ModelInstanceState::GetMostOptimizedProfile and EvaluateTensorRTContext (the branch for an
# input that is neither ragged nor a shape tensor: this project's configs have neither), with
# the ValidateDimension template of src/tensorrt_utils.h. Upstream's names are kept.
_LLONG_MAX = 2**63 - 1


def most_optimized_profile(
    shapes: Mapping[str, Sequence[int]], profiles: list[ProfileShapes], *, batching: bool
) -> int | None:
    """``GetMostOptimizedProfile``: the index of the profile Triton runs a batch of these input
    shapes with (``shapes`` as TensorRT gets them: with the batch axis when ``batching``, i.e.
    the config's ``max_batch_size > 0``), or None where Triton finds none (it then logs "failed
    to find any Optimization Profile", goes on with the first, and TensorRT refuses the shapes).

    ``profiles`` are the plan's profiles the config lists in ``instance_group.profile`` (this
    project lists every one when there are several; with one, Triton has one context)."""
    if len(profiles) <= 1:  # trt_contexts_.size() == 1: that context, whatever the shapes
        return 0
    # Run(): the batch is the sum of the requests' first input's shape[0]; 1 without batching
    total_batch_size = next(iter(shapes.values()))[0] if batching else 1
    citr, shortest_distance = 0, _LLONG_MAX
    for cit, ranges in enumerate(profiles):  # trt_contexts_ is a std::map: ascending index
        current_distance = _evaluate_tensorrt_context(ranges, total_batch_size, shapes, batching)
        if current_distance < shortest_distance:  # strict: a tie keeps the lower index
            citr, shortest_distance = cit, current_distance
    return None if shortest_distance == _LLONG_MAX else citr


def _evaluate_tensorrt_context(
    ranges: ProfileShapes, total_batch_size: int, shapes: Mapping[str, Sequence[int]], batching: bool
) -> int:
    """``EvaluateTensorRTContext``: the profile's distance to the request, ``LLONG_MAX`` when an
    input's shape is outside the profile's min..max."""
    by_name = {r.name: r for r in ranges}
    error_distance = 0
    for input_name, input_shape in shapes.items():  # the request's inputs, in its order
        input_shape_vec = list(input_shape)
        if batching:
            input_shape_vec[0] = total_batch_size
        if input_name not in by_name:
            raise ValueError(f"the plan has no input '{input_name}'")
        r = by_name[input_name]
        if not _validate_dimension(input_shape_vec, r.min, r.max):
            return _LLONG_MAX
        opt_dims = r.opt
        error_distance += abs(opt_dims[0] - total_batch_size)
        for idx in range(1, len(opt_dims)):
            # Upstream compares opt dim idx with request dim idx - 1: with a batch axis the
            # request's shape starts with it (set to the batch above), so opt dim 1 meets the
            # batch size, each later opt dim the request dim before its own, and the request's
            # last dim is never compared. Ported as it is, since it decides the choice.
            error_distance += abs(opt_dims[idx] - input_shape_vec[idx - 1])
    return error_distance


def _validate_dimension(this_dims: list[int], min_dims: Sequence[int], max_dims: Sequence[int]) -> bool:
    """``ValidateDimension(this_dims, min, max, skip_first_dimension=false)``: no error."""
    if len(this_dims) != len(max_dims):
        return False
    return all(d == -1 or lo <= d <= hi for d, lo, hi in zip(this_dims, min_dims, max_dims, strict=False))


def profile_for(shapes: Mapping[str, Sequence[int]], profiles: list[ProfileShapes], *, batching: bool) -> int:
    """The profile Triton serves these input shapes with (:func:`most_optimized_profile`),
    where TensorRT also accepts them; else ValueError, as the request would fail on the GPU."""
    index = most_optimized_profile(shapes, profiles, batching=batching)
    if index is not None and (not profiles or all(_within(shapes.get(r.name), r) for r in profiles[index])):
        return index
    held = "; ".join(
        f"{i}: {' '.join(f'{r.name} {list(r.min)}..{list(r.max)}' for r in p)}"
        for i, p in enumerate(profiles)
    )
    shown = {k: tuple(v) for k, v in shapes.items()}
    raise ValueError(f"input shapes {shown} fit no optimization profile ({held})")


def opt_batches(profiles: list[ProfileShapes]) -> list[int]:
    """The batch sizes Triton serves each profile at its best: every profile's opt batch."""
    return [ranges[0].opt[0] for ranges in profiles if ranges]


def _within(shape: Sequence[int] | None, r: InputRange) -> bool:
    return (
        shape is not None
        and len(shape) == len(r.min)
        and all(lo <= s <= hi for lo, s, hi in zip(r.min, shape, r.max, strict=True))
    )
