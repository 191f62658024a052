"""The benchmarks' object detector: a YOLO-style network written in torch (a strided backbone, a
head per stride 8, 16 and 32), exported to ONNX as Ultralytics exports its detectors (``images``
[N, 3, 320, 320] in, ``output0`` [N, 4 + 80, 2100] out: centre x, y, width, height in the input's
pixels and 80 class probabilities per anchor), about 0.36 G multiply-adds per image. Its weights are
random (seeded) with the class biases set so that a photo gets a handful of boxes, as a trained
detector's would; speed, not accuracy, is what the benchmark measures."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

SIZE = 320
CLASSES = 80
SEED = 20261207
HEAD_GAIN, HEAD_BIAS = 1.0, -5.5


def build() -> Any:
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.SiLU())

    class Detector(nn.Module):  # type: ignore[misc]  # torch is untyped here
        def __init__(self) -> None:
            super().__init__()
            self.p3 = nn.Sequential(block(3, 16, 2), block(16, 32, 2), block(32, 64, 2), block(64, 128, 1))
            self.p4 = nn.Sequential(block(128, 128, 2), block(128, 128, 1))
            self.p5 = nn.Sequential(block(128, 128, 2), block(128, 128, 1))
            self.heads = nn.ModuleList([nn.Conv2d(128, 4 + CLASSES, 1) for _ in range(3)])

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            p3 = self.p3(images)
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            rows = []
            for features, head, stride in zip((p3, p4, p5), self.heads, (8, 16, 32), strict=True):
                out = head(features)
                _, _, h, w = out.shape
                ys = torch.arange(h, dtype=images.dtype).view(1, h, 1).expand(1, h, w)
                xs = torch.arange(w, dtype=images.dtype).view(1, 1, w).expand(1, h, w)
                cx = (xs + 0.5 + torch.tanh(out[:, 0])) * stride
                cy = (ys + 0.5 + torch.tanh(out[:, 1])) * stride
                wh = torch.exp(out[:, 2:4].clamp(-3, 3)) * (2 * stride)
                box = torch.cat([cx.unsqueeze(1), cy.unsqueeze(1), wh], dim=1)
                rows.append(torch.cat([box, torch.sigmoid(out[:, 4:])], dim=1).flatten(2))
            return torch.cat(rows, dim=2)

    torch.manual_seed(SEED)
    model = Detector()
    with torch.no_grad():  # batch norm's statistics from seeded smooth noise: activations of unit scale
        for norm in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
            norm.momentum = None  # a cumulative average over the calibration batches
        for _ in range(4):
            noise = torch.rand(8, 3, SIZE // 8, SIZE // 8)
            model(nn.functional.interpolate(noise, size=(SIZE, SIZE), mode="bilinear"))
        model.eval()
        for head in model.heads:  # a few classes above 0.25 per photo
            head.weight.mul_(HEAD_GAIN)
            head.bias[4:] = HEAD_BIAS
    return model


def export(path: Path) -> Path:
    """The network as an ONNX file with a dynamic batch and the head's dims written out."""
    import onnx
    import torch

    model = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        anchors = int(model(torch.zeros(1, 3, SIZE, SIZE)).shape[2])
        torch.onnx.export(
            model, (torch.zeros(1, 3, SIZE, SIZE),), str(path), input_names=["images"],
            output_names=["output0"], dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
            opset_version=17, dynamo=False,
        )  # fmt: skip
    graph = onnx.load(path)
    for dim, size in zip(
        graph.graph.output[0].type.tensor_type.shape.dim[1:], (4 + CLASSES, anchors), strict=True
    ):
        dim.Clear()
        dim.dim_value = size
    onnx.save(graph, path)
    return path


def photos(root: Path) -> list[bytes]:
    """Real photographs of several sizes: scikit-learn's two (640 x 427) and the calibration set's
    evaluation crops (256 x 256)."""
    import sklearn.datasets

    shipped = Path(sklearn.datasets.__file__).parent / "images"
    files = [shipped / "china.jpg", shipped / "flower.jpg",
             *sorted((root / "calibration" / "resnet18" / "eval").glob("*.jpg"))[:6]]  # fmt: skip
    return [f.read_bytes() for f in files]
