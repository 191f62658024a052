"""ResNet-18 (He et al., 2015) in plain PyTorch, and the image reader for its calibration/eval folders.

Module names follow torchvision's ``resnet18`` (``conv1``, ``layer1.0.bn2``, ``layer2.0.downsample.0``,
``fc``...), so a torchvision state dict loads into it unchanged.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from builder.errors import DataError

if TYPE_CHECKING:
    from builder.python_models.image_preprocess.model import Recipe

NUM_CLASSES = 1000
SEED = 18
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
CALIB_DIR = Path(__file__).resolve().parent.parent / "calibration" / "resnet18" / "calib"
BN_IMAGES = 16  # calibration images: their statistics become the BatchNorm running stats and fc
RESIDUAL_GAMMA = 0.1  # initial scale of the last BatchNorm in each residual block
LOGIT_STD = 2.0  # mean spread of the logits over classes, on the calibration images


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = _stage(64, 64, 1)
        self.layer2 = _stage(64, 128, 2)
        self.layer3 = _stage(128, 256, 2)
        self.layer4 = _stage(256, 512, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.fc(self.features(x))
        return logits


def _stage(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1))


def resnet18() -> nn.Module:
    """ResNet-18, 1000 classes, eval mode, with fixed-seed weights: NOT pretrained.

    No package reachable offline ships pretrained ImageNet weights, so the weights are drawn from a
    fixed seed and then initialised from data, so that (as in a trained network) the logits carry
    image-dependent signal that reduced precision (FP16, INT8) changes little:

    - convolutions use torchvision's initialisation; the last BatchNorm of each residual block starts
      with a small scale (Goyal et al., 2017), so every block is close to the identity and the input's
      information reaches the pooled features instead of being washed out by 16 random layers;
    - the BatchNorm running statistics are measured on calibration photographs;
    - the ``fc`` rows are fixed-seed random mixtures of those photographs' pooled features, centred
      and made orthogonal to their mean, so the logits read out the directions along which images
      differ and average zero over the photographs (``fc.bias`` is zero).

    The classes carry no ImageNet meaning (see ``resnet18_labels.txt``). The weights are the same on
    every call (bit for bit, whatever the thread count, on a given CPU and torch version).
    """
    model = ResNet18()
    model.load_state_dict(_weights())
    return model.eval()


@cache
def _weights() -> dict[str, torch.Tensor]:
    model = ResNet18()
    gen = torch.Generator().manual_seed(SEED)
    _init(model, gen)
    images = torch.from_numpy(read_images(CALIB_DIR)["input"][:BN_IMAGES])
    _calibrate_batchnorm(model, images)
    _fit_classifier(model, images, gen)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _init(model: ResNet18, gen: torch.Generator) -> None:
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu", generator=gen)
        elif isinstance(m, nn.BatchNorm2d):
            # Residual branches start small (the block is near the identity); the rest start at 1.
            nn.init.constant_(m.weight, RESIDUAL_GAMMA if name.endswith(".bn2") else 1.0)
            nn.init.zeros_(m.bias)


@torch.no_grad()
def _calibrate_batchnorm(model: ResNet18, images: torch.Tensor) -> None:
    """Running stats := the batch stats of ``images`` (one training-mode pass, cumulative average)."""
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average: one batch gives exactly its statistics
    model(images)
    model.eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 0.1


@torch.no_grad()
def _fit_classifier(model: ResNet18, images: torch.Tensor, gen: torch.Generator) -> None:
    """``fc`` := random mixtures of the images' centred pooled features, orthogonal to their mean.

    ReLU features are positive and share one large common component (their mean); the image-specific
    part is what a classifier reads. Rows orthogonal to the mean make the logits ignore that component
    (and a change of overall feature scale only rescales the logits), so quantization error along it
    does not reach them.
    """
    features = model.features(images).double()
    mean = features.mean(0)
    direction = mean / mean.norm()
    centred = features - mean
    centred -= torch.outer(centred @ direction, direction)
    mixing = torch.randn(model.fc.out_features, len(images), generator=gen, dtype=torch.float64)
    weight = mixing @ centred
    weight *= LOGIT_STD / (centred @ weight.T).std(1).mean()
    model.fc.weight.copy_(weight)
    model.fc.bias.zero_()


def read_images(path: Path, recipe: Recipe | None = None) -> dict[str, NDArray[Any]]:
    """{"input": float32 [N, 3, 224, 224]} for every .jpg/.jpeg/.png in ``path``, in name order,
    preprocessed with ``recipe`` (ImageNet's by default)."""
    from builder.python_models.image_preprocess.model import IMAGENET, preprocess_image

    path = Path(path)
    if not path.is_dir():
        raise DataError("image folder not found", file=path)
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"no {'/'.join(IMAGE_SUFFIXES)} images in the folder", file=path)
    pixels = [preprocess_image(f.read_bytes(), recipe or IMAGENET) for f in files]
    return {"input": np.stack(pixels).astype(np.float32)}
