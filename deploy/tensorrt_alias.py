"""Makes ``import tensorrt`` the ``tensorrt_bindings`` module.

The serving image installs only ``tensorrt-cu13-bindings`` (no libraries of its
own), so the plans are built by the very libnvinfer the server's TensorRT
backend loads them with. The ``tensorrt`` wheel would add a second copy of the
libraries, of a version that may differ. Installed as ``tensorrt.py``.
"""

import sys

import tensorrt_bindings

sys.modules[__name__] = tensorrt_bindings
