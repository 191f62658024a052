"""The contract of the ``hf_image_processor`` model: what the builder copies beside it and the
tensor it makes, declared once (its input and output names it reads from its config). It imports
nothing of the project.
"""

from __future__ import annotations

# The checkpoint's files copied into the version folder; AutoImageProcessor loads them there.
PROCESSOR_FILES = ("preprocessor_config.json",)
PIXEL_VALUES = "pixel_values"  # the output: FP32 [C, H, W], the checkpoint's model's input
