"""A validated ``models:`` entry with a given source, for the source tests."""

from __future__ import annotations

from typing import Any

from builder.spec import ModelSpec


def model(source: str, **override: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "m",
        "source": source,
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [4]}],
        "tolerances": {"fp32": {"max_abs": 0.0}},
    }
    return ModelSpec.model_validate(fields | override)
