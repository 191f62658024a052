"""The contract of the ``image_preprocess`` model: the config parameters a spec's ``parameters:``
may set (models.yaml's ``efficientnet_preprocess``) and the model reads, declared once. Each is
optional; an unset one keeps torchvision's ImageNet recipe. It imports nothing of the project.
"""

from __future__ import annotations

# -- config parameters (string values) -------------------------------------------------------------
RESIZE = "resize"  # the shorter side, in pixels, before the crop
CROP = "crop"  # the centre square's side, in pixels
MEAN = "mean"  # "r,g,b" on the 0..255 pixel scale
STD = "std"  # "r,g,b" on the 0..255 pixel scale
RESAMPLING = "resampling"  # bilinear or bicubic
