"""The engines' lifecycle: their arguments (``model.json``), their start on an event loop thread of
their own, the stub's threads made nicer than them, and the drain and stop at unload (as Triton's
vLLM backend: requests in flight run to their end and their final responses go out first)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

from ..contract import ENGINE_ARGS_FILE
from .lanes import Lane, lane_engine_args
from .metrics import stat_logger_factory
from .sending import Sending

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None

OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"
# The stub's threads (tokenizing, vLLM's output handling, sending) run this much nicer than the
# engines' processes (than the stub was when it started them). On a CPU host they share the cores
# with the engine core, whose OMP worker stalls a whole decoding step when another thread takes
# its core: at the same nice value the served model's rounds at 16 streams dropped to half the
# tokens/s now and then, the engine using as much CPU (bench/results/llm_per_token.json,
# runs.nice5).
FRONTEND_NICE = 5


def yield_to_engines() -> None:
    """Every thread of this process (not the engines' processes, started before) FRONTEND_NICE
    nicer than now. Linux keeps a nice value per thread, and a thread started later inherits its
    starter's: passes repeat until one finds every thread done. A host that refuses (no /proc,
    a policy) keeps the threads as they are and says so."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, 0) + FRONTEND_NICE)
    try:
        for _ in range(5):
            changed = [_renice(int(tid), target) for tid in os.listdir("/proc/self/task")]
            if not any(changed):
                return
    except OSError as exc:
        pb_utils.Logger.log_warn(f"vllm_engine: the stub's threads keep their priority ({exc})")


def _renice(tid: int, target: int) -> bool:
    """Set the thread's nice value to ``target``; whether it had another."""
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) == target:
            return False
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except ProcessLookupError:  # the thread ended meanwhile
        return False
    return True


def engine_args(version_dir: Path) -> dict[str, Any]:
    """model.json, with a relative ``model`` (or ``tokenizer``) resolved against the version folder."""
    path = version_dir / ENGINE_ARGS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; it holds the vLLM engine arguments")
    args: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for key in ("model", "tokenizer"):
        if key in args and not Path(args[key]).is_absolute() and (version_dir / args[key]).exists():
            args[key] = str(version_dir / args[key])
    return args


def without_unknown_stream_interval(config: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """``config`` without ``stream_interval`` where this vLLM's engine arguments (``known``) have
    none (older releases): the builder writes it, and the responses then come one per token."""
    if "stream_interval" in config and "stream_interval" not in known:
        pb_utils.Logger.log_warn("vllm_engine: this vLLM has no stream_interval: one response per token")
        return {k: v for k, v in config.items() if k != "stream_interval"}
    return config


def config_parameter(config: dict[str, Any], name: str, default: str) -> str:
    value = config.get("parameters", {}).get(name, {}).get("string_value", "")
    return str(value) if value else default


class EngineLifecycle(Sending):
    def _start_engines(self) -> None:
        from vllm.tokenizers import get_tokenizer

        config = self.engine_config
        # Our own tokenizer instance: requests are tokenized on the stub's thread, not the loop's.
        self.tokenizer = get_tokenizer(config.get("tokenizer") or config["model"])
        self.loop = asyncio.new_event_loop()
        started: queue.Queue[BaseException | None] = queue.Queue()
        self.loop_thread = threading.Thread(
            target=self._run_loop, args=(started,), name="vllm-loop", daemon=True
        )
        self.loop_thread.start()
        outcome = started.get()
        if outcome is not None:
            raise outcome

    def _run_loop(self, started: queue.Queue[BaseException | None]) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            for lane in self.lanes:
                own = not lane.rule.shares_default
                lane.engine = self.loop.run_until_complete(self._create_engine(lane)) if own else None
            for lane in self.lanes:
                lane.engine = lane.engine or self.lanes[0].engine
        except BaseException as exc:
            started.put(exc)
            return
        started.put(None)
        self._guarded(self.loop.run_forever)

    async def _create_engine(self, lane: Lane) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        config = without_unknown_stream_interval(lane_engine_args(self.engine_config, lane.rule), known)
        factory = stat_logger_factory(lane.metrics)
        previous = os.environ.get(OMP_BIND)
        if lane.rule.cpus:  # read when the engine core process starts
            os.environ[OMP_BIND] = lane.rule.cpus
        try:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**config), stat_loggers=[factory])
        finally:
            if previous is None:
                os.environ.pop(OMP_BIND, None)
            else:
                os.environ[OMP_BIND] = previous

    def finalize(self) -> None:
        """As Triton's vLLM backend: the requests in flight run to their end and their final
        responses go out, then the threads and the engines stop."""
        self._drain()
        self.outbox.put(None)  # after every final response
        for thread in self.threads:
            thread.join(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=10)
        for lane in self.lanes:
            if not lane.rule.shares_default:
                lane.engine.shutdown()
            lane.engine = None  # AsyncLLM.__del__ shuts down again: let it run now, not at exit
            lane.metrics.close()
        gc.collect()
        self.families = None  # after their metrics
        if self.watcher is not None:  # the engines are gone: nothing left to watch
            self.watcher.kill()
            self.watcher.wait()
        pb_utils.Logger.log_info("vllm_engine: engines stopped")

    def _drain(self) -> None:
        """Wait for the requests in flight; cancel them only when nothing can finish them (the
        engine or the event loop died)."""
        with self.idle:
            while self.jobs and self.failure is None and self.loop_thread.is_alive():
                pb_utils.Logger.log_info(f"vllm_engine: awaiting {len(self.jobs)} requests in flight")
                self.idle.wait(timeout=1.0)
            left = [job.task for job in self.jobs.values() if job.task is not None]
        if left and self.loop_thread.is_alive():
            for task in left:
                self.loop.call_soon_threadsafe(task.cancel)
            with self.idle:
                self.idle.wait_for(lambda: not self.jobs, timeout=5.0)
