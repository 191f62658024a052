"""The contract of the ``hf_image_processor`` model: what the builder copies beside it and the
tensors it makes, declared once (which of them a model gives, and their names' order, it reads from
its config). It imports nothing of the project.
"""

from __future__ import annotations

# The checkpoint's files copied into the version folder; AutoImageProcessor loads them there.
PROCESSOR_FILES = ("preprocessor_config.json",)
PIXEL_VALUES = "pixel_values"  # FP32 [C, H, W], the checkpoint's model's input
# Given where the config declares them (an object detector's pre-processing):
PIXEL_MASK = "pixel_mask"  # INT64 [H, W]: 1 on the image, 0 on the padding up to the request's largest
IMAGE_SIZE = "image_size"  # INT64 [2]: each image's height and width once upright, before resizing
