"""Publishing swaps whole repositories; leftovers of killed builds are cleaned."""

from __future__ import annotations

import os
from pathlib import Path

from builder.publish import clean_leftovers, publish, staging_dir


def make(folder: Path, text: str) -> None:
    (folder / "m" / "1").mkdir(parents=True)
    (folder / "m" / "config.pbtxt").write_text(text)


def test_first_publish_renames(tmp_path: Path) -> None:
    repo = tmp_path / "model_repository"
    staging = staging_dir(repo)
    make(staging, "new")
    publish(staging, repo)
    assert (repo / "m" / "config.pbtxt").read_text() == "new"
    assert not staging.exists()


def test_publish_replaces_whole_repository(tmp_path: Path) -> None:
    repo = tmp_path / "model_repository"
    repo.mkdir()
    make(repo, "old")
    (repo / "gone").mkdir()
    inode = os.stat(repo).st_ino
    staging = staging_dir(repo)
    make(staging, "new")
    publish(staging, repo)
    assert (repo / "m" / "config.pbtxt").read_text() == "new"
    assert not (repo / "gone").exists()
    assert os.stat(repo).st_ino != inode
    assert [p.name for p in tmp_path.iterdir()] == ["model_repository"]


def test_leftovers_of_dead_builds_are_removed(tmp_path: Path) -> None:
    repo = tmp_path / "model_repository"
    dead = tmp_path / "model_repository.staging-999999999"
    dead.mkdir()
    mine = staging_dir(repo)
    clean_leftovers(repo)
    assert not dead.exists()
    assert mine.exists()  # this process is alive: its staging folder stays


def test_two_renames_where_the_exchange_is_missing(tmp_path: Path, monkeypatch) -> None:
    import builder.publish as pub

    monkeypatch.setattr(pub, "_exchange", lambda a, b: False)
    repo = tmp_path / "model_repository"
    repo.mkdir()
    make(repo, "old")
    staging = staging_dir(repo)
    make(staging, "new")
    publish(staging, repo)
    assert (repo / "m" / "config.pbtxt").read_text() == "new"
    assert not staging.exists()
    assert not repo.with_name("model_repository.old").exists()


def test_a_mounted_repository_gets_its_entries_swapped_inside_it(tmp_path: Path, monkeypatch) -> None:
    import builder.publish as pub

    repo = tmp_path / "models"
    repo.mkdir()
    make(repo, "old")
    (repo / "kept").mkdir()
    (repo / "manifest.json").write_text("old")
    inode = os.stat(repo).st_ino
    monkeypatch.setattr(pub.os.path, "ismount", lambda p: Path(p) == repo)
    assert pub.in_place(repo)
    staging = pub.inner_staging_dir(repo)
    make(staging, "new")
    (staging / "manifest.json").write_text("new")
    pub.publish_entries(staging, repo)
    assert os.stat(repo).st_ino == inode  # the mount point itself is never renamed
    assert (repo / "m" / "config.pbtxt").read_text() == "new"
    assert (repo / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in repo.iterdir()) == ["kept", "m", "manifest.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["models"]  # nothing beside it


def test_leftovers_inside_a_mounted_repository_are_removed(tmp_path: Path, monkeypatch) -> None:
    import builder.publish as pub

    repo = tmp_path / "models"
    (repo / ".staging-999999999").mkdir(parents=True)
    (repo / "m.old").mkdir()
    (repo / "m").mkdir()
    monkeypatch.setattr(pub.os.path, "ismount", lambda p: Path(p) == repo)
    pub.clean_leftovers(repo)
    assert [p.name for p in repo.iterdir()] == ["m"]
