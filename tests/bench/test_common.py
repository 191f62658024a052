"""The benchmarks' shared helpers."""

import json
from pathlib import Path

import pytest

from bench import common


def test_a_results_name_is_one_json_file_with_or_without_its_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert common.save("study_x", {"a": 1}) == tmp_path / "study_x.json"
    assert common.save("study_y.json", {"b": 2}) == tmp_path / "study_y.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study_x.json", "study_y.json"]
    assert json.loads((tmp_path / "study_y.json").read_text()) == {"b": 2}
