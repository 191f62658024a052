"""Which optimization profile Triton serves a request with (its TensorRT backend's rule)."""

from __future__ import annotations

import numpy as np
import pytest

from builder.engines.profiles import InputRange, profile_for

# Two profiles over the same shapes, built for batch 2 and batch 16 (as models.yaml writes them).
BOTH = [
    [InputRange("input", (1, 3, 8, 8), (2, 3, 8, 8), (16, 3, 8, 8))],
    [InputRange("input", (1, 3, 8, 8), (16, 3, 8, 8), (16, 3, 8, 8))],
]


@pytest.mark.parametrize(("batch", "profile"), [(1, 0), (2, 0), (9, 0), (10, 1), (12, 1), (16, 1)])
def test_triton_picks_the_profile_whose_opt_shape_is_nearest_not_the_first_that_fits(batch, profile) -> None:
    # |2 - 9| = 7 <= |16 - 9| = 7: a tie goes to the lower index, as in GetMostOptimizedProfile
    assert profile_for({"input": (batch, 3, 8, 8)}, BOTH) == profile


def test_the_distance_sums_every_dimension_of_every_input() -> None:
    wide = [
        [InputRange("a", (1, 4), (4, 8), (8, 64)), InputRange("b", (1, 4), (4, 8), (8, 64))],
        [InputRange("a", (1, 4), (4, 32), (8, 64)), InputRange("b", (1, 4), (4, 32), (8, 64))],
    ]
    assert profile_for({"a": (4, 16), "b": (4, 16)}, wide) == 0  # 16 vs 32: 8 + 8 < 16 + 16
    assert profile_for({"a": (4, 16), "b": (4, 30)}, wide) == 1  # 8 + 22 > 16 + 2
    with pytest.raises(ValueError, match="fit no optimization profile"):
        profile_for({"a": (9, 16), "b": (4, 16)}, wide)


def test_the_evaluation_set_runs_at_every_profiles_opt_batch_and_the_max() -> None:
    from builder.engines.trt_runner import profiles_run, verification_batches

    assert verification_batches(16, BOTH) == [2, 16]
    assert verification_batches(32, BOTH) == [2, 16, 32]
    assert verification_batches(0, []) == [0]
    inputs = {"input": np.zeros((20, 3, 8, 8), np.float32)}
    assert profiles_run(inputs, 16, BOTH) == [0, 1]  # batch 16 chunks go to profile 1
