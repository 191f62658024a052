"""The light model of the benchmarks: a small CNN of about 1 ms per image on two threads.

Exported to ONNX through the builder from a bench spec (``bench/common.py``), like any zoo model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

SHAPE = (3, 32, 32)
SEED = 20240611


def build() -> nn.Module:
    """Four 3x3 convolutions (64-64-128-128 channels, ~70 M multiply-adds), average pool, 10 logits."""
    torch.manual_seed(SEED)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(128, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )
    return model.eval()


def evaluation_samples(path: Path | None = None) -> dict[str, NDArray[np.float32]]:
    rng = np.random.default_rng(SEED)
    return {"input": rng.standard_normal((32, *SHAPE), dtype=np.float32)}
