"""The test run's processes read from /proc: their resident memory together and the vLLM engines
among them, sampled through the run for its summary (tests/conftest.py)."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
ENGINE_TITLE = b"EngineCore"  # vLLM's engine core process names itself VLLM::EngineCore (setproctitle)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    rss: int  # bytes
    cmdline: str

    @property
    def engine(self) -> bool:
        return ENGINE_TITLE.decode() in self.cmdline


def parents(proc: Path = Path("/proc")) -> dict[int, int]:
    """pid -> parent pid of every process (those that end meanwhile are left out)."""
    found: dict[int, int] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return found


def descendants(parent_of: dict[int, int], root: int) -> list[int]:
    """``root`` and every process under it."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in parent_of.items():
        children[ppid].append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def read(pids: Iterable[int], proc: Path = Path("/proc")) -> list[Proc]:
    """Resident set and command line of each process still there."""
    found = []
    for pid in pids:
        try:
            pages = int((proc / str(pid) / "statm").read_text().split()[1])
            cmdline = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        found.append(Proc(pid, ppid, pages * PAGE, cmdline.strip()))
    return found


@dataclass
class Peaks:
    rss: int = 0  # bytes: the resident sets of the tree summed, at its highest
    engines: int = 0  # vLLM engine cores up at once, at most
    engines_seen: list[str] = field(default_factory=list)  # what started them, when there were most
    at_peak: list[Proc] = field(default_factory=list)  # the processes when the sum was highest

    def add(self, procs: list[Proc]) -> None:
        total = sum(p.rss for p in procs)
        if total > self.rss:
            self.rss, self.at_peak = total, procs
        engines = [p for p in procs if p.engine]
        if len(engines) > self.engines:
            self.engines, self.engines_seen = len(engines), [started_by(p, procs) for p in engines]


def started_by(engine: Proc, procs: list[Proc]) -> str:
    """The engine's parent's command line, cut to 200 characters: a Python-backend stub names its
    model.py (so the repository, whose temporary folder names its fixture), a build its vLLM child."""
    parent = next((p for p in procs if p.pid == engine.ppid), None)
    return parent.cmdline[:200] if parent is not None else f"pid {engine.ppid}"


class Sampler:
    """Reads the tree under ``root`` every ``interval_s`` seconds in a thread until stopped."""

    def __init__(self, root: int, interval_s: float = 1.0) -> None:
        self.root, self.interval_s, self.peaks = root, interval_s, Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-tree-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        return self.peaks

    def sample(self) -> None:
        self.peaks.add(read(descendants(parents(), self.root)))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)


def breakdown(procs: list[Proc], top: int = 15) -> list[str]:
    """The largest processes, one line each: resident GiB and the command line cut to 160 characters."""
    ranked = sorted(procs, key=lambda p: p.rss, reverse=True)[:top]
    return [f"{p.rss / 2**30:5.2f} GiB  pid {p.pid} (parent {p.ppid})  {p.cmdline[:160]}" for p in ranked]
