"""The stage cache skips unchanged stages and never trusts a half-written one."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cache import StageCache, exclusive, key_of, tree_hash


def test_second_run_with_same_key_is_skipped(tmp_path: Path) -> None:
    calls: list[Path] = []
    cache = StageCache(tmp_path, log=lambda _: None)

    def stage(out: Path) -> dict:
        calls.append(out)
        (out / "a.txt").write_text("x")
        return {"n": 1}

    first = cache.run("m", "s", "k1", stage)
    second = cache.run("m", "s", "k1", stage)
    assert not first.skipped and second.skipped
    assert second.info == {"n": 1}
    assert len(calls) == 1
    assert (second.out / "a.txt").read_text() == "x"
    assert cache.run("m", "s", "k2", stage).skipped is False


def test_failed_stage_leaves_nothing_to_trust(tmp_path: Path) -> None:
    cache = StageCache(tmp_path, log=lambda _: None)

    def boom(out: Path) -> dict:
        (out / "half.onnx").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cache.run("m", "s", "k", boom)
    assert not (tmp_path / "m" / "s" / "k").exists()
    assert list((tmp_path / "m" / "s").iterdir()) == []


def test_keys_and_tree_hash_change_with_content(tmp_path: Path) -> None:
    assert key_of({"a": 1}) == key_of({"a": 1}) != key_of({"a": 2})
    (tmp_path / "f").write_text("1")
    before = tree_hash(tmp_path)
    (tmp_path / "f").write_text("2")
    assert tree_hash(tmp_path) != before


def test_prune_keeps_the_newest_outputs_of_a_stage(tmp_path: Path) -> None:
    import os
    import time

    cache = StageCache(tmp_path, log=lambda _: None)
    keys = [f"k{i}" for i in range(5)]
    for i, key in enumerate(keys):
        result = cache.run("m", "s", key, lambda out: {})
        os.utime(result.out, (time.time() - 100 + i, time.time() - 100 + i))
    kept = sorted(p.name for p in (tmp_path / "m" / "s").iterdir())
    assert kept == ["k2", "k3", "k4"]  # the one just written and the two newest before it


def test_a_stage_another_build_is_making_is_waited_for_and_made_once(tmp_path: Path) -> None:
    import threading

    making, waiting = threading.Event(), threading.Event()
    calls: list[Path] = []

    def stage(out: Path) -> dict:
        calls.append(out)
        making.set()
        assert waiting.wait(60), "the second build never waited"
        (out / "a.txt").write_text("made once")
        return {}

    def log(line: str) -> None:
        if "another build is making it" in line:
            waiting.set()

    builder = threading.Thread(target=lambda: StageCache(tmp_path, log).run("m", "s", "k", stage))
    builder.start()
    assert making.wait(60)
    second = StageCache(tmp_path, log).run("m", "s", "k", stage)  # blocks until the first is done
    builder.join(60)
    assert len(calls) == 1 and second.skipped
    assert (second.out / "a.txt").read_text() == "made once"


def test_exclusive_locks_a_folder_in_place_and_a_file_it_makes(tmp_path: Path) -> None:
    folder, file = tmp_path / "results", tmp_path / "s.lock"
    folder.mkdir()
    for path in (folder, file):
        _second_holder_waits(path)
    assert file.is_file() and list(folder.iterdir()) == []


def _second_holder_waits(path: Path) -> None:
    """A second holder says it waits, and enters only once the first has let go."""
    import threading

    waited, entered = threading.Event(), threading.Event()

    def second() -> None:
        with exclusive(path, waited.set):
            entered.set()

    with exclusive(path):
        other = threading.Thread(target=second)
        other.start()
        assert waited.wait(60), f"{path.name}: the second holder did not wait"
        assert not entered.is_set(), f"{path.name}: both held the lock at once"
    other.join(60)
    assert entered.is_set()


def test_a_tree_s_hash_leaves_out_python_bytecode(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("X = 1\n")
    before = tree_hash(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0bytecode")
    (tmp_path / "stray.pyc").write_bytes(b"\0bytecode")
    assert tree_hash(tmp_path) == before
    (tmp_path / "model.py").write_text("X = 2\n")
    assert tree_hash(tmp_path) != before
