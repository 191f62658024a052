"""The shared memory a server's processes leave in ``/dev/shm`` when they are killed.

Triton's Python backend (a region per stub), vLLM (its engine's message queues) and loky (its
semaphores) remove their files on a clean exit, but not after SIGKILL, and on tmpfs every one
left holds memory until the host restarts. Whoever killed them clears what is left: the files
of those kinds that no live process maps any more.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SHM = Path("/dev/shm")
LEFTOVER_KINDS = ("triton_python_backend_shm_region_", "psm_", "sem.loky-")


def shm_names(folder: Path = SHM) -> set[str]:
    """The files of LEFTOVER_KINDS in ``folder``."""
    try:
        return {p.name for p in folder.iterdir() if p.name.startswith(LEFTOVER_KINDS)}
    except OSError:
        return set()


def mapped_names(pids: Iterable[int | str] | None = None, folder: Path = SHM) -> set[str]:
    """The files of ``folder`` that the processes ``pids`` (all when None) map."""
    prefix = f"{folder}/"
    paths = Path("/proc").glob("[0-9]*/maps") if pids is None else (Path(f"/proc/{p}/maps") for p in pids)
    names: set[str] = set()
    for maps in paths:
        try:
            text = maps.read_text(errors="replace")
        except OSError:  # the process ended
            continue
        names |= {line.split(prefix, 1)[1].split(" ")[0] for line in text.splitlines() if prefix in line}
    return names


def mapped_inodes(folder: Path = SHM) -> set[int]:
    """The inodes of the files of ``folder`` that any live process maps, under whatever name."""
    prefix = f"{folder}/"
    inodes: set[int] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text(errors="replace")
        except OSError:
            continue
        inodes |= {int(line.split()[4]) for line in text.splitlines() if prefix in line}
    return inodes


def _inode(path: Path) -> int:
    try:
        return path.stat().st_ino
    except OSError:
        return -1


def orphaned(candidates: set[str], folder: Path = SHM) -> set[str]:
    """Those of ``candidates`` (LEFTOVER_KINDS only) still in ``folder`` that no live process maps:
    nothing can use them any more. glibc's ``sem_open`` maps a temporary file and then links it
    to the semaphore's name, so a semaphore in use (loky's, while vLLM starts its workers) shows
    in /proc/*/maps under the deleted temporary name: its inode says it is mapped."""
    left = candidates & shm_names(folder)
    if not left:
        return set()
    left -= mapped_names(folder=folder)
    inodes = mapped_inodes(folder)
    return {name for name in left if _inode(folder / name) not in inodes}


def remove_orphaned(candidates: set[str], folder: Path = SHM) -> set[str]:
    """Remove the orphaned ones of ``candidates``; returns their names."""
    gone = orphaned(candidates, folder)
    for name in gone:
        (folder / name).unlink(missing_ok=True)
    return gone


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members
