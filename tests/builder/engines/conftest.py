"""Fixtures of the engine tests; they live in engine_support.py, which the tests import too."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from engine_support import a10, calibration_table, trt10, trt11, trt108, variants

__all__ = ["a10", "calibration_table", "trt10", "trt11", "trt108", "variants"]
