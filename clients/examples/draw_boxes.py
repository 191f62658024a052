"""Draw what a served object detector finds on a photo, and write the picture.

    python clients/examples/draw_boxes.py street.jpg boxes.jpg --model detr_pipeline \\
        --url 127.0.0.1:8001 --threshold 0.5

Each box is outlined in its class's colour with its label and score above it. The photo is turned
upright by its EXIF orientation first, as the server turns it, so the boxes land where they belong.
Needs Pillow (``pip install 'tritonforge-client[images]'``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageOps

from clients import Detection, Detector

COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#46f0f0", "#f032e6", "#bcf60c")


def draw(photo: Path, found: list[Detection]) -> Image.Image:
    """The upright photo with each detection outlined and labelled."""
    picture = ImageOps.exif_transpose(Image.open(photo)).convert("RGB")
    pen = ImageDraw.Draw(picture)
    width = max(2, round(min(picture.size) / 200))
    for d in found:
        colour = COLOURS[d.class_id % len(COLOURS)]
        pen.rectangle(d.box, outline=colour, width=width)
        caption = f"{d.label} {d.score:.2f}"
        left, top = d.box[0], max(0.0, d.box[1] - 12 - width)
        pen.rectangle(pen.textbbox((left, top), caption), fill=colour)
        pen.text((left, top), caption, fill="white")
    return picture


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photo", type=Path)
    parser.add_argument("out", type=Path, help="the picture to write (its suffix picks the format)")
    parser.add_argument("--model", required=True, help="the detector's pipeline (<name>_pipeline)")
    parser.add_argument("--url", default="127.0.0.1:8001", help="gRPC host:port, or http://host:port")
    parser.add_argument("--threshold", type=float, help="the lowest score kept (default: the model's)")
    args = parser.parse_args(argv)
    with Detector(args.url, args.model) as detector:
        (found,) = detector.detect([args.photo], threshold=args.threshold)
    draw(args.photo, found).save(args.out)
    print(f"{args.out}: {len(found)} boxes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
