"""TensorRT plans for targets that build engines: detect, build in a subprocess, verify, record.

Nothing here imports TensorRT at import time; only the build worker does.
"""
