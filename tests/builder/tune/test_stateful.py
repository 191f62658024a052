"""The tuner refuses a stateful model: the sequence batcher schedules it, dynamic batching never does."""

from __future__ import annotations

import pytest

from builder.spec import Spec
from builder.tune.candidates import search_space
from tests.builder.fixtures.recurrent import entries


def test_a_stateful_model_has_nothing_to_tune() -> None:
    spec = Spec.model_validate({"models": entries()})
    with pytest.raises(ValueError, match="model 'rnn' is stateful"):
        search_space(spec, "rnn", cpus=2, budget_ms=10.0)
