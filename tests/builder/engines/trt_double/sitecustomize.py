"""Python imports this at start-up when ``trt_double/`` is on PYTHONPATH (build subprocesses)."""

import trt_double_runner

trt_double_runner.install()
