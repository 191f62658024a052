"""What every task composes the same way: an entry's own fields win over the checkpoint's, the
default tolerances are the precisions' the entry asks for, and the pipeline's first step hands on
everything the preprocessing model gives."""

from __future__ import annotations

from tests.builder.tasks.checkpoints import TEXT_INPUTS, composed, text


def test_what_the_entry_states_wins() -> None:
    shape = {"min": [1], "opt": [8], "max": [16]}
    profiles = [{"shapes": {n: shape for n in TEXT_INPUTS}, "opt_batch": 2}]
    stated = {"profiles": profiles, "max_batch_size": 2, "tolerances": {"fp32": {"max_abs": 0.1}}}
    spec = composed(text("text-classification"), **stated)
    core = spec.model("m")
    assert core.max_batch_size == 2 and spec.ensembles[0].max_batch_size == 2
    assert core.profiles[0].shapes["input_ids"].max == [16]
    assert {p.value: t.max_abs for p, t in core.tolerances.items()} == {"fp32": 0.1}


def test_the_checkpoints_own_values_fill_the_rest() -> None:
    asked = {"precisions": ["fp32", "fp16", "int8"], "calibration": {"data": "texts.txt"}}
    spec = composed(text("text-classification", max_length=100), **asked)
    core = spec.model("m")
    assert core.max_batch_size == 8 and [p.max_batch_size for p in spec.python_models] == [8, 8]
    assert {p.value: t.min_cosine for p, t in core.tolerances.items()} == {"fp32": 0.9999, "fp16": 0.999,
                                                                           "int8": 0.98}  # fmt: skip
    shape = core.profiles[0].shapes["attention_mask"]
    assert (shape.min, shape.opt, shape.max) == ([1], [100], [100])  # opt: 128, or the longest if shorter
    assert all(p.batching.enabled for p in spec.python_models)
