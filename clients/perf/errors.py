"""The one error the perf wrapper raises; its message says what to do."""


class PerfError(RuntimeError):
    """perf_analyzer missing or failed, a model input that needs a shape, a bad baseline."""


class UnstableError(PerfError):
    """perf_analyzer's windows did not agree within the stability percentage."""
