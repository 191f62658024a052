"""Regenerate calib/ and eval/: deterministic crops of freely licensed photographs shipped in packages.

Each photograph is split along its longer side: crops for calib/ come from the first 60 %, crops for
eval/ from the last 40 %, so the two sets share no pixels. Needs scikit-learn and scikit-image
(``pip install scikit-image==0.26.0``). Run: ``python calibration/resnet18/make_images.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
SIZE = 256
QUALITY = 80
SEED = 18
SPLIT = 0.6  # fraction of the longer side that feeds calib/
COUNTS = {"calib": 64, "eval": 32}


def photographs() -> dict[str, Image.Image]:
    """The source photographs, RGB, in a fixed order (licences in README.md)."""
    import skimage.data
    from sklearn.datasets import load_sample_image  # type: ignore[import-untyped]

    photos = {name: Image.fromarray(load_sample_image(f"{name}.jpg")) for name in ("china", "flower")}
    for name in ("astronaut", "chelsea", "coffee", "rocket"):
        photos[name] = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
    return photos


def region(photo: Image.Image, part: str) -> Image.Image:
    """The calib (first 60 %) or eval (last 40 %) part of the photograph along its longer side."""
    w, h = photo.size
    if w >= h:
        cut = int(w * SPLIT)
        box = (0, 0, cut, h) if part == "calib" else (cut, 0, w, h)
    else:
        cut = int(h * SPLIT)
        box = (0, 0, w, cut) if part == "calib" else (0, cut, w, h)
    return photo.crop(box)


def random_crop(area: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A square crop of 35-100 % of the shorter side, maybe mirrored, resized to SIZE."""
    w, h = area.size
    side = int(min(w, h) * rng.uniform(0.35, 1.0))
    x = int(rng.integers(0, w - side + 1))
    y = int(rng.integers(0, h - side + 1))
    crop = area.crop((x, y, x + side, y + side))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return crop.resize((SIZE, SIZE), Image.Resampling.BICUBIC)


def write_set(part: str, photos: dict[str, Image.Image], rng: np.random.Generator) -> None:
    out = HERE / part
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    names = list(photos)
    areas = {name: region(photos[name], part) for name in names}
    for i in range(COUNTS[part]):
        name = names[i % len(names)]
        random_crop(areas[name], rng).save(out / f"{part}_{i:03d}_{name}.jpg", quality=QUALITY)


def main() -> None:
    photos = photographs()
    rng = np.random.default_rng(SEED)
    for part in COUNTS:
        write_set(part, photos, rng)


if __name__ == "__main__":
    main()
