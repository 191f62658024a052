"""A vLLM plugin (entry point ``vllm.general_plugins``) that vLLM loads in each of its processes: where
the environment names VLLM_SPIN_ENV, the readers of vLLM's shared-memory queues spin that many
seconds after a read, in place of vLLM's 1 s.

vLLM's engine core and its worker wait on each other through those queues once per engine step, and
after each read a reader spins on ``sched_yield`` for a second before it sleeps on the queue's
socket. On a GPU host that is a core of many; on a CPU host it is a core the model's own threads and
the other models need: the worker burned 1.0 s of CPU in the 3 idle seconds after each short request,
and the engine core spun through every decoding step while the worker computed it. The model sets
the variable for its engines (``utils/engine.py``), so vLLM processes started otherwise (the build's
verification, vLLM's own server beside the benchmarks) keep vLLM's behaviour."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from builder.python_models.vllm_engine.contract import VLLM_SPIN_ENV

# Under vLLM's own logger, so the line carries vLLM's process prefix, e.g. "(EngineCore pid=...)".
log = logging.getLogger("vllm.tritonforge_spin")
APPLIED = "shared-memory queue readers spin {seconds:g} s after a read"


def register() -> None:
    """Apply VLLM_SPIN_ENV to every SpinCondition this process makes from now on; nothing when it is
    unset, and a warning (vLLM's own spinning kept) where this vLLM has no SpinCondition."""
    value = os.environ.get(VLLM_SPIN_ENV)
    if value is None:
        return
    try:
        seconds = max(0.0, float(value))
        from vllm.distributed.device_communicators import shm_broadcast

        condition = shm_broadcast.SpinCondition
    except (ValueError, ImportError, AttributeError) as exc:
        log.warning("%s=%s not applied: %s", VLLM_SPIN_ENV, value, exc)
        return
    if getattr(condition.__init__, "spin_s", None) is not None:
        return  # loaded before in this process
    condition.__init__ = _with_spin(condition.__init__, seconds)
    log.info(APPLIED.format(seconds=seconds) + f" ({VLLM_SPIN_ENV}; vLLM's own: 1 s)")


def _with_spin(init: Any, seconds: float) -> Any:
    @functools.wraps(init)
    def spin_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["busy_loop_s"] = seconds
        init(self, *args, **kwargs)

    spin_init.spin_s = seconds  # type: ignore[attr-defined]
    return spin_init
