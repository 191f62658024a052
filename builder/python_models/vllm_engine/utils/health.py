"""Health, as Triton's vLLM backend has it: a helper thread that dies, or an engine whose core
process died, makes the model answer UNAVAILABLE, and with the config parameter
``ENABLE_VLLM_HEALTH_CHECK`` unload itself, so that it stops being READY (a model can unload itself
only under explicit model control)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

from ..contract import UNHEALTHY
from .state import State

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None


class Health(State):
    def _guarded(self, run: Callable[[], None]) -> None:
        """Run a helper thread's loop; should it ever raise, say why and stop serving (UNAVAILABLE,
        and unloaded with the health check on) rather than leave requests waiting on a dead thread."""
        try:
            run()
        except BaseException as exc:
            pb_utils.Logger.log_error(f"vllm_engine: {traceback.format_exc()}")
            self._fail(f"thread {threading.current_thread().name} stopped ({type(exc).__name__}: {exc})")

    def _fail(self, reason: str) -> None:
        """From now on refuse requests as UNAVAILABLE; with ENABLE_VLLM_HEALTH_CHECK, unload the
        model (as Triton's vLLM backend does) so that it stops being READY."""
        with self.lock:
            if self.failure is not None:
                return
            self.failure = reason
        pb_utils.Logger.log_error(f"vllm_engine: {reason}: {UNHEALTHY.lower()}")
        if not self.health_check:
            return
        try:
            pb_utils.unload_model(self.name)  # returns at once; finalize() comes once requests end
        except Exception as exc:  # only explicit model control lets a model unload itself
            pb_utils.Logger.log_error(f"vllm_engine: model '{self.name}' cannot unload itself ({exc})")

    def _check_engines(self) -> None:
        """An engine whose core process died (vLLM's own monitor marks it) fails the model."""
        dead = [lane.rule.name for lane in self.lanes if lane.engine is not None and lane.engine.errored]
        if dead and self.failure is None:
            self._fail(f"the vLLM engine of lane(s) {', '.join(dead)} died")
