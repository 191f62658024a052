"""What the model's parts share: the attributes ``TritonPythonModel.initialize`` sets, declared once
for the classes that each hold one concern's methods (health, sending, the engines' lifecycle)."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from .lanes import Lane
from .responses import Job


class State:
    name: str  # the model's name, as Triton knows it
    engine_config: dict[str, Any]  # model.json's engine arguments
    lanes: list[Lane]
    jobs: dict[str, Job]  # admitted, final response not posted yet
    lock: threading.Lock
    idle: threading.Condition  # notified as each job posts its final response
    # (job, response, flags); a response of None tells the sending thread to watch the job.
    outbox: queue.Queue[tuple[Job, Any, int] | None]
    loop: asyncio.AbstractEventLoop
    loop_thread: threading.Thread
    threads: list[threading.Thread]
    tokenizer: Any
    families: dict[str, Any] | None  # the custom metric families (None: metrics off)
    health_check: bool  # ENABLE_VLLM_HEALTH_CHECK: unload the model when it fails
    failure: str | None  # why the model cannot serve (the engine or a thread died)
    watcher: Any  # the process that kills the engines should this one die first (None: none)
