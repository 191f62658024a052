"""A model's spec and a build of it with made-up verification reports, for the targets' tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from builder.records import ModelBuild, VerificationReport
from builder.spec import ModelSpec, Precision, Variant, load_spec

FP32, FP16, INT8, BF16 = Precision.FP32, Precision.FP16, Precision.INT8, Precision.BF16
OV = "openvino"


def model(**fields: object) -> dict[str, object]:
    return {
        "name": "m",
        "source": "pkg.mod:fn",
        "inputs": [{"name": "x", "dtype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "dims": [2]}],
        "max_batch_size": 8,
        "evaluation": {"data": "eval.npz"},
        "precisions": ["fp32", "bf16"],
        "tolerances": {p: {"min_cosine": 0.99} for p in ("fp32", "fp16", "int8", "int8_dynamic", "bf16")},
        "calibration": {"data": "calib.npz"},
        **fields,
    }


def loaded(tmp_path: Path, **fields: object) -> ModelSpec:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model(**fields)]}))
    return load_spec(path).models[0]


def built(spec: ModelSpec, timings: dict[Variant, float | None], moved: float | None = None) -> ModelBuild:
    """Each variant verified (a time) or failed (None), its answer moving ``moved`` with its mates."""
    b = ModelBuild(spec)
    for variant, ms in timings.items():
        b.variants[variant] = Path("model.onnx")
        b.reports[variant] = VerificationReport(variant, ms is not None, {}, [] if ms else ["off"], ms,
                                                batch_max_diff=moved)  # fmt: skip
    return b
