"""Synthetic input values that a model can take: ids in the vocabulary, masks of ones, type ids
zeros, positions counting, a sample rate; floats are seeded noise."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.spec.synthetic import SAMPLE_RATE, synthetic_array, token_ranges
from tests.builder.fixtures import guessed_shapes as g


def _array(name: str, dtype: type = np.int64, vocab: int | None = None) -> NDArray[Any]:
    return synthetic_array(name, dtype, [4, 6], np.random.default_rng(0), vocab)


def test_integer_inputs_follow_their_names() -> None:
    ids = _array("input_ids", vocab=30)
    assert ids.min() >= 0 and ids.max() < 30 and len(np.unique(ids)) > 1
    assert (_array("attention_mask") == 1).all()
    assert (_array("attention_mask", np.bool_) == True).all()  # noqa: E712
    assert (_array("token_type_ids") == 0).all() and (_array("segment_ids") == 0).all()
    assert (_array("position_ids") == np.arange(6)).all()
    assert (_array("sample_rate") == SAMPLE_RATE).all()
    assert (_array("input_ids") == 0).all()  # no vocabulary known: an index or a size, zeros
    assert (_array("ids", np.int8, vocab=1000) < 128).all()


def test_floats_are_seeded_noise_and_strings_empty() -> None:
    x = _array("x", np.float32)
    assert x.dtype == np.float32 and x.std() > 0.5
    assert np.array_equal(x, _array("x", np.float32))
    assert (_array("text", np.object_) == "").all()


def test_a_rank_0_input_gets_one_value() -> None:
    rate = synthetic_array("sample_rate", np.int64, [], np.random.default_rng(0))
    assert rate.shape == () and int(rate) == SAMPLE_RATE


def test_the_vocabulary_is_the_table_a_gather_indexes_through_a_cast() -> None:
    assert token_ranges(g.token_encoder(vocab=37)) == {"input_ids": 37, "token_type_ids": 2}
    assert token_ranges(g.audio_front_end()) == {}
