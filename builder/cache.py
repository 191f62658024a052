"""Content hashing and the stage cache that makes an unchanged rebuild a no-op.

A stage's output lives in ``<cache>/<model>/<stage>/<key>/`` where ``key`` hashes
everything the stage reads. The folder is written under a temporary name and
renamed when the stage finishes, so a killed build never leaves a half-written
artifact that a later build would trust. Builds sharing a cache make each stage once: a build
that finds another one making the same stage waits for it (``<model>/<stage>.lock``, an
advisory lock the system drops when its holder dies) and takes its output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DONE = "stage.json"


def cache_root(spec_file: Path, chosen: Path | None = None) -> Path:
    """The stage cache: ``chosen``, else ``.tritonforge/cache`` beside the spec. Absolute: stages
    hand paths under it to child processes that run elsewhere (vLLM, TensorRT)."""
    return (chosen or spec_file.parent / ".tritonforge" / "cache").resolve()


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def arrays_hash(arrays: Mapping[str, Any], seed: bytes = b"") -> str:
    """Hash of named arrays by content (``seed`` first): each name, dtype, shape and its values. Not
    the bytes of the ``.npz`` that holds them, which carry each entry's write time."""
    import numpy as np

    digest = hashlib.sha256(seed)
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{value.dtype}:{value.shape}".encode())
        # an object array's bytes are pointers: its values are hashed by their text
        digest.update(value.tobytes() if value.dtype != object else repr(value.tolist()).encode())
    return digest.hexdigest()


def tree_hash(path: Path) -> str:
    """Hash of a file, or of every file under a folder (names and contents; a linked folder is
    followed, as a copy of the tree would hold it), leaving out the bytecode Python writes beside a
    package's sources."""
    if path.is_file():
        return file_hash(path)
    digest = hashlib.sha256()
    found = (Path(top) / name for top, _, names in os.walk(path, followlinks=True) for name in names)
    for item in sorted(p for p in found if p.is_file() and not _bytecode(p.relative_to(path))):
        digest.update(str(item.relative_to(path)).encode())
        digest.update(file_hash(item).encode())
    return digest.hexdigest()


def _bytecode(relative: Path) -> bool:
    return "__pycache__" in relative.parts or relative.suffix == ".pyc"


def key_of(*parts: object) -> str:
    """A short stable key of JSON-able parts."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


@dataclass
class StageResult:
    name: str
    key: str
    out: Path
    skipped: bool
    seconds: float
    info: dict[str, object]


@contextlib.contextmanager
def exclusive(path: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an advisory lock on ``path``, a folder or a lock file (made if missing), that the system
    drops when its holder dies; ``waiting`` is called first when another process holds it."""
    fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


class StageCache:
    """Runs a stage unless an output for the same key is already complete."""

    def __init__(self, root: Path, log: Callable[[str], None]) -> None:
        self.root = root
        self.log = log

    def run(
        self, model: str, stage: str, key: str, fn: Callable[[Path], dict[str, object] | None]
    ) -> StageResult:
        out = self.folder(model, stage, key)
        with self._claimed(model, stage):
            return self._run(model, stage, key, out, fn)

    def folder(self, model: str, stage: str, key: str) -> Path:
        """Where the stage's output for ``key`` lives once made (see ``finished``)."""
        return self.root / model / stage / key

    @staticmethod
    def finished(folder: Path) -> bool:
        """Whether ``folder`` holds a stage's whole output (its record is written last)."""
        return (folder / DONE).is_file()

    @contextlib.contextmanager
    def _claimed(self, model: str, stage: str) -> Iterator[None]:
        """Hold the stage's lock; wait, saying so, while another build holds it. The lock sits beside
        the stage's real folder: a cache whose stage folders link to another cache's shares its locks."""
        folder = self.root / model / stage
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder.resolve().parent / f"{stage}.lock"
        with exclusive(lock, lambda: self.log(f"[{model}] {stage}: another build is making it, waiting ...")):
            yield

    def _run(
        self, model: str, stage: str, key: str, out: Path, fn: Callable[[Path], dict[str, object] | None]
    ) -> StageResult:
        done = out / DONE
        if self.finished(out):
            record = json.loads(done.read_text())
            self.log(f"[{model}] {stage}: unchanged, skipped")
            return StageResult(stage, key, out, True, record.get("seconds", 0.0), record.get("info", {}))
        self.log(f"[{model}] {stage} ...")
        # A private temporary folder: concurrent builds sharing the cache never clobber each other.
        tmp = out.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        start = time.perf_counter()
        try:
            info = fn(tmp) or {}
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        seconds = time.perf_counter() - start
        (tmp / DONE).write_text(json.dumps({"seconds": seconds, "info": info}, indent=1, default=str))
        if self.finished(out):  # another build finished the same stage first: keep its output
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        self._prune(out)
        self.log(f"[{model}] {stage}: done in {seconds:.1f} s")
        return StageResult(stage, key, out, False, seconds, info)

    @staticmethod
    def _prune(keep: Path, max_entries: int = 3) -> None:
        """Keep the newest few outputs of a stage so the cache does not grow forever."""
        siblings = sorted(
            (p for p in keep.parent.iterdir() if p.is_dir() and p != keep and ".tmp-" not in p.name),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in siblings[max_entries - 1 :]:
            shutil.rmtree(old, ignore_errors=True)
