"""The models.yaml patch: only the tuned model's batching / instances, comments kept."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest

from builder.spec import load_spec
from builder.tune.candidates import Candidate, apply, of_spec
from builder.tune.patch import load_spec_text, patch, patched_text

ROOT = Path(__file__).parents[3]


def test_patch_touches_only_the_tuned_model(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    text = (ROOT / "models.yaml").read_text()
    spec_file.write_text(text)
    count = load_spec(spec_file).model("resnet18").instances.count
    cand = Candidate(count + 1, 500, (8, 16), 32)
    new, diff = patch(spec_file, "resnet18", cand)
    assert diff
    added = Counter(new.splitlines()) - Counter(text.splitlines())  # lines, whatever the diff's layout
    removed = Counter(text.splitlines()) - Counter(new.splitlines())
    assert sorted(added) == sorted(
        [
            "      preferred_batch_sizes: [8, 16]",
            "      max_queue_delay_us: 500",
            f"    instances: {{count: {count + 1}}}",
        ]
    )
    assert sorted(removed) in ([], [f"    instances: {{count: {count}}}"])
    assert [ln for ln in text.splitlines() if ln.lstrip().startswith("#")] == [
        ln for ln in new.splitlines() if ln.lstrip().startswith("#")
    ]  # comments kept
    spec_file.write_text(new)
    spec = load_spec(spec_file)
    before = load_spec(ROOT / "models.yaml")
    assert spec.model("resnet18") == apply(before.model("resnet18"), cand)
    assert spec.model("simple") == before.model("simple")


def test_patch_replaces_existing_values_and_flow_maps() -> None:
    text = (
        "models:\n"
        "  - name: m  # the model\n"
        "    source: a.b:c\n"
        "    inputs: [{name: x, dtype: FP32, dims: [4]}]\n"
        "    outputs: [{name: y, dtype: FP32, dims: [4]}]\n"
        "    max_batch_size: 16\n"
        "    batching: {preferred_batch_sizes: [4], max_queue_delay_us: 100}\n"
        "    instances: {count: 3}\n"
        "    evaluation: {data: e.npz}\n"
        "    tolerances: {fp32: {min_cosine: 0.99}}\n"
    )
    new = patched_text(text, "m", Candidate(1, 0, (8,), 8))
    assert "max_batch_size: 8\n" in new
    assert "batching: {preferred_batch_sizes: [8], max_queue_delay_us: 0}" in new
    assert "instances: {count: 1}" in new
    assert "# the model" in new


def test_unchanged_candidate_gives_an_empty_diff(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    spec_file.write_text((ROOT / "models.yaml").read_text())
    _, diff = patch(spec_file, "simple", Candidate(1, 0, (), 8))
    assert diff == ""


def test_unknown_model() -> None:
    with pytest.raises(KeyError):
        patched_text((ROOT / "models.yaml").read_text(), "nope", Candidate(1, 0, (), 8))


def test_patch_writes_spinning_into_the_local_targets_options_and_keeps_the_rest(tmp_path: Path) -> None:
    spec_file = tmp_path / "models.yaml"
    text = (ROOT / "models.yaml").read_text()
    spec_file.write_text(text)
    model = load_spec(spec_file).model("resnet18")
    cand = dataclasses.replace(of_spec(model), spinning=False)  # resnet18's own config, workers asleep
    new, diff = patch(spec_file, "resnet18", cand)
    changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert changed == ["+    targets:", "+      local: {spinning: false}"]
    assert new.replace("    targets:\n      local: {spinning: false}\n", "", 1) == text
    spec_file.write_text(new)
    assert load_spec(spec_file).model("resnet18").target_options("local") == {"spinning": False}


def test_patch_sets_spinning_beside_other_local_options_and_removes_it() -> None:
    text = (
        "models:\n"
        "  - name: m\n"
        "    source: a.b:c\n"
        "    inputs: [{name: x, dtype: FP32, dims: [4]}]\n"
        "    outputs: [{name: y, dtype: FP32, dims: [4]}]\n"
        "    max_batch_size: 8\n"
        "    evaluation: {data: e.npz}\n"
        "    tolerances: {fp32: {min_cosine: 0.99}}\n"
        "    targets:\n"
        "      local: {serve: fp32}  # kept\n"
    )
    spun = patched_text(text, "m", Candidate(1, 0, (), 8, spinning=True))
    assert spun.startswith(text[: text.index("    targets:")])
    assert re.search(r"\n      local: \{serve: fp32, spinning: true\} +# kept\n$", spun)
    unset = patched_text(spun, "m", Candidate(1, 0, (), 8))
    assert re.search(r"\n      local: \{serve: fp32\} +# kept\n$", unset)  # column kept
    assert load_spec_text(unset) == load_spec_text(text)
    only = text.replace("{serve: fp32}", "{spinning: false}")
    assert patched_text(only, "m", Candidate(1, 0, (), 8)) == text[: text.index("    targets:")]
