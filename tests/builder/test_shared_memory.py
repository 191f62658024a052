"""What a killed server's processes leave in /dev/shm, and what may be removed."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from builder.shared_memory import group_members, mapped_names, orphaned, remove_orphaned


def test_only_candidates_no_process_maps_are_orphaned(tmp_path: Path) -> None:
    for name in ("psm_old", "psm_in_use", "psm_left", "triton_python_backend_shm_region_x", "other"):
        (tmp_path / name).write_bytes(b"\0" * 4096)
    candidates = {"psm_in_use", "psm_left", "triton_python_backend_shm_region_x", "other", "psm_gone"}
    with (tmp_path / "psm_in_use").open("r+b") as f, mmap.mmap(f.fileno(), 4096):
        assert "psm_in_use" in mapped_names([os.getpid()], tmp_path)
        assert orphaned(candidates, tmp_path) == {"psm_left", "triton_python_backend_shm_region_x"}
        remove_orphaned(candidates, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "psm_in_use", "psm_old"]


def test_a_semaphore_mapped_under_its_temporary_name_is_in_use(tmp_path: Path) -> None:
    # glibc's sem_open: map a temporary file, link it to the name, unlink the temporary name
    (tmp_path / "sem.tmp").write_bytes(b"\0" * 4096)
    with (tmp_path / "sem.tmp").open("r+b") as f, mmap.mmap(f.fileno(), 4096):
        os.link(tmp_path / "sem.tmp", tmp_path / "sem.loky-1-abc")
        (tmp_path / "sem.tmp").unlink()
        assert orphaned({"sem.loky-1-abc"}, tmp_path) == set()
    assert orphaned({"sem.loky-1-abc"}, tmp_path) == {"sem.loky-1-abc"}


def test_a_group_lists_its_live_processes() -> None:
    assert os.getpid() in group_members(os.getpgid(0))
    assert os.getpid() not in group_members(os.getpgid(0) + 1_000_000)
