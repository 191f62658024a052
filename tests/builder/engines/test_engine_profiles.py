"""Which optimization profile Triton serves a request with: the port of its TensorRT backend's
GetMostOptimizedProfile / EvaluateTensorRTContext (src/instance_state.cc), case by case along
its code paths."""

from __future__ import annotations

import numpy as np
import pytest

from builder.engines.profiles import InputRange, most_optimized_profile, profile_for

# Two profiles over the same shapes, built for batch 2 and batch 16 (as models.yaml writes them).
BOTH = [
    [InputRange("input", (1, 3, 8, 8), (2, 3, 8, 8), (16, 3, 8, 8))],
    [InputRange("input", (1, 3, 8, 8), (16, 3, 8, 8), (16, 3, 8, 8))],
]

# Two overlapping profiles that differ in a non-batch dim only: opt width 8 against 48.
OVERLAPPING = [
    [InputRange("input", (1, 3, 4, 4), (4, 3, 8, 8), (16, 3, 64, 64))],
    [InputRange("input", (1, 3, 4, 4), (4, 3, 8, 48), (16, 3, 64, 64))],
]

# Two profiles for different image sizes (the tests' tiny model): 4..16 and 32..64 pixels.
BOTH_SIZES = [
    [InputRange("input", (1, 3, 4, 4), (4, 3, 8, 8), (16, 3, 16, 16))],
    [InputRange("input", (1, 3, 32, 32), (8, 3, 32, 32), (16, 3, 64, 64))],
]


@pytest.mark.parametrize(("batch", "profile"), [(1, 0), (2, 0), (9, 0), (10, 1), (12, 1), (16, 1)])
def test_the_batch_size_decides_between_profiles_over_the_same_shapes(batch, profile) -> None:
    # batch 9: |2 - 9| + |3 - 9| + |8 - 3| + |8 - 8| = 18 against |16 - 9| + 6 + 5 + 0 = 18: a tie
    # keeps the lower index (upstream's `current_distance < shortest_distance`)
    assert profile_for({"input": (batch, 3, 8, 8)}, BOTH, batching=True) == profile


def test_overlapping_profiles_differing_in_a_non_batch_dim_go_as_triton_indexes_them() -> None:
    # With a batch axis upstream compares opt dim i with request dim i - 1 (the request's shape
    # starts with the batch): a 8x48 image is 0 + |3 - 4| + |8 - 3| + |8 - 8| = 6 from profile 0
    # and 6 + |48 - 8| = 46 from profile 1, whose opt is that very shape. The nearest-opt rule
    # this project had said profile 1.
    assert profile_for({"input": (4, 3, 8, 48)}, OVERLAPPING, batching=True) == 0
    # and a 48x8 image, whose height meets the opt width: 46 from profile 0, 6 from profile 1
    # (the nearest-opt rule: profile 0, 40 against 80)
    assert profile_for({"input": (4, 3, 48, 8)}, OVERLAPPING, batching=True) == 1


def test_the_batch_size_meets_opt_dims_0_and_1_and_the_last_request_dim_none() -> None:
    wide = [
        [InputRange("a", (1, 4), (4, 8), (8, 64)), InputRange("b", (1, 4), (4, 8), (8, 64))],
        [InputRange("a", (1, 4), (4, 32), (8, 64)), InputRange("b", (1, 4), (4, 32), (8, 64))],
    ]
    # per input |4 - 4| + |opt[1] - 4|: 4 + 4 against 28 + 28, whatever the second dims are
    assert profile_for({"a": (4, 16), "b": (4, 16)}, wide, batching=True) == 0
    assert profile_for({"a": (4, 16), "b": (4, 30)}, wide, batching=True) == 0  # nearest opt: 1
    assert profile_for({"a": (4, 64), "b": (4, 64)}, wide, batching=True) == 0
    # at batch 8: |4 - 8| + |8 - 8| = 4 against 4 + |32 - 8| = 28 per input
    assert profile_for({"a": (8, 30), "b": (8, 30)}, wide, batching=True) == 0


def test_without_batching_the_batch_size_is_one_and_the_dims_still_shift() -> None:
    # max_batch_size 0: Run() counts each request as batch 1; input_shape_vec keeps its dims, and
    # opt dim i still meets request dim i - 1.
    seq = [
        [InputRange("ids", (1, 16), (8, 16), (128, 16))],
        [InputRange("ids", (1, 16), (64, 16), (128, 16))],
    ]
    # |8 - 1| + |16 - 60| = 51 against |64 - 1| + 44 = 107 (nearest opt: profile 1, 52 against 4)
    assert profile_for({"ids": (60, 16)}, seq, batching=False) == 0
    # with batching the same shapes are a batch of 60: 52 + 44 against 4 + 44
    assert profile_for({"ids": (60, 16)}, seq, batching=True) == 1


def test_a_profile_outside_whose_min_max_any_input_lies_is_never_chosen() -> None:
    # ValidateDimension on the whole shape (batch included): profile 0 holds up to 16x16 only
    assert profile_for({"input": (4, 3, 40, 40)}, BOTH_SIZES, batching=True) == 1
    # a rank the profile does not have fits no profile
    assert most_optimized_profile({"input": (4, 3, 8)}, BOTH_SIZES, batching=True) is None


def test_no_profile_fits_and_triton_fails_the_request() -> None:
    # upstream: "failed to find any Optimization Profile", then the first profile, which TensorRT
    # refuses for these shapes
    assert most_optimized_profile({"input": (4, 3, 20, 20)}, BOTH_SIZES, batching=True) is None
    with pytest.raises(ValueError, match=r"input shapes \{'input': \(4, 3, 20, 20\)\} fit no optimization"):
        profile_for({"input": (4, 3, 20, 20)}, BOTH_SIZES, batching=True)


def test_one_context_is_used_without_looking_at_the_shapes() -> None:
    # trt_contexts_.size() == 1 (the config lists no profiles: "default", profile 0)
    assert most_optimized_profile({"input": (4, 3, 20, 20)}, BOTH_SIZES[:1], batching=True) == 0
    assert most_optimized_profile({"input": (4, 3, 8, 8)}, [], batching=True) == 0
    # TensorRT then refuses what the profile does not hold
    with pytest.raises(ValueError, match="fit no optimization profile"):
        profile_for({"input": (4, 3, 20, 20)}, BOTH_SIZES[:1], batching=True)


def test_the_evaluation_set_runs_at_every_profiles_opt_batch_and_the_max() -> None:
    from builder.engines.trt_runner import profiles_run, verification_batches

    assert verification_batches(16, BOTH) == [2, 16]
    assert verification_batches(32, BOTH) == [2, 16, 32]
    assert verification_batches(0, []) == [0]
    inputs = {"input": np.zeros((20, 3, 8, 8), np.float32)}
    assert profiles_run(inputs, 16, BOTH) == [0, 1]  # batch 16 chunks go to profile 1
