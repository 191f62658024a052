"""Publishing a model repository atomically.

The new repository is written beside the old one and swapped in with one
``renameat2(RENAME_EXCHANGE)`` call, so a server polling the folder or a build
killed at any moment only ever sees a complete repository. Where the kernel or
file system lacks the exchange, two renames are used (a window of microseconds
with no repository, never a half-written one).

A repository that is itself a mount point (KServe's emptyDir at ``/mnt/models``) cannot be
renamed, and its parent may not be writable: there the changed entries are staged in a hidden
folder inside it and swapped in one by one (``publish_entries``), ``manifest.json`` last.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

RENAME_EXCHANGE = 2
AT_FDCWD = -100
INNER_STAGING = ".staging-"  # hidden: Triton skips names that start with a dot


def staging_dir(repo: Path) -> Path:
    """A fresh sibling folder on the same file system as ``repo``."""
    return _fresh(repo.with_name(f"{repo.name}.staging-{os.getpid()}"))


def in_place(repo: Path) -> bool:
    """Whether ``repo`` must be updated inside itself: a mount point, or a parent this user
    cannot write."""
    return repo.is_dir() and (os.path.ismount(repo) or not os.access(repo.parent, os.W_OK))


def inner_staging_dir(repo: Path) -> Path:
    """A fresh hidden folder inside ``repo``, for :func:`publish_entries`."""
    return _fresh(repo / f"{INNER_STAGING}{os.getpid()}")


def _fresh(staging: Path) -> Path:
    """``staging`` emptied: a folder of this process's pid left by a killed build is removed."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def clean_leftovers(repo: Path) -> None:
    """Remove staging folders of builds that were killed before publishing."""
    if not repo.parent.is_dir():
        return
    _remove_dead(repo.parent.glob(f"{repo.name}.staging-*"))
    if in_place(repo):
        _remove_dead(repo.glob(f"{INNER_STAGING}*"))
        for old in repo.glob("*.old"):  # entry names have no dots: these are publish's
            shutil.rmtree(old, ignore_errors=True)
        return
    shutil.rmtree(repo.with_name(f"{repo.name}.old"), ignore_errors=True)


def _remove_dead(stagings: Iterable[Path]) -> None:
    for stale in stagings:
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and _alive(int(pid)):
            continue  # another build is writing it right now
        shutil.rmtree(stale, ignore_errors=True)


def publish(staging: Path, repo: Path) -> None:
    """Swap ``staging`` in as ``repo``; the previous repository is deleted after."""
    if not repo.exists():
        os.rename(staging, repo)
        return
    if _exchange(staging, repo):
        shutil.rmtree(staging, ignore_errors=True)
        return
    old = repo.with_name(f"{repo.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(repo, old)
    os.rename(staging, repo)
    shutil.rmtree(old, ignore_errors=True)


def publish_entries(staging: Path, repo: Path) -> None:
    """Swap each entry of ``staging`` (an :func:`inner_staging_dir`) into ``repo``: folders
    first, each whole, then files (so ``manifest.json`` names only what is in place); then
    remove ``staging``."""
    entries = sorted(staging.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    for entry in entries:
        if entry.is_dir():
            publish(entry, repo / entry.name)
        else:
            os.replace(entry, repo / entry.name)
    shutil.rmtree(staging, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    rc = renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    return bool(rc == 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
