"""bench.llm_variants: the sides it serves, their configs, its arguments and its arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from bench.figures import backends_table
from bench.llm_variants import (
    C1_FIRST,
    READS,
    VLLM,
    VLLM_C1_FIRST,
    Measured,
    Side,
    cores_used,
    keep,
    parse,
    summary,
    write_official_model,
    write_repo,
)
from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS
from builder.llm.serving import MODEL_SOURCE, EngineArgs


def _backend(root: Path) -> Path:
    src = root / "src"
    (src / "utils").mkdir(parents=True)
    (src / "model.py").write_text("class TritonPythonModel: ...\n")
    (src / "utils" / "metrics.py").write_text("")
    return src


def test_the_official_backend_is_served_with_its_own_interface(tmp_path: Path) -> None:
    write_official_model(tmp_path / "official", _backend(tmp_path), EngineArgs(model=str(tmp_path)))
    cfg = text_format.Parse((tmp_path / "official" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.backend == "python" and cfg.max_batch_size == 0 and cfg.model_transaction_policy.decoupled
    assert [i.name for i in cfg.input] == [t.name for t in BACKEND_INPUTS]
    assert [o.name for o in cfg.output] == [t.name for t in BACKEND_OUTPUTS]
    version = tmp_path / "official" / "1"
    assert (version / "vllm_backend_model.py").read_text().startswith("class TritonPythonModel")
    assert "C.UTF-8" in (version / "model.py").read_text() and (version / "utils" / "metrics.py").is_file()
    assert (version / "model.json").is_file()


def test_a_variant_is_the_model_with_its_patch_and_a_patch_that_does_not_apply_stops_the_run(
    tmp_path: Path,
) -> None:
    module = "utils/responses.py"  # a module of the package beside model.py
    source = (MODEL_SOURCE.parent / module).read_text().splitlines(keepends=True)
    line = next(i for i, text in enumerate(source) if text.startswith("WATCH_PERIOD = "))
    patch = tmp_path / "watch.patch"
    patch.write_text(f"--- a/{module}\n+++ b/{module}\n@@ -{line + 1} +{line + 1} @@\n-{source[line]}"
                     "+WATCH_PERIOD = 0.5\n")  # fmt: skip
    sides = write_repo(tmp_path / "repo", tmp_path, None, {"watch": patch})
    assert [s.name for s in sides] == ["smollm2", "watch", VLLM]
    assert "WATCH_PERIOD = 0.5\n" in (tmp_path / "repo" / "watch" / "1" / module).read_text()
    patch.write_text(patch.read_text().replace("-WATCH_PERIOD", "-NO_SUCH_LINE"))
    with pytest.raises(SystemExit, match="does not apply"):
        write_repo(tmp_path / "repo", tmp_path, None, {"watch": patch})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variant", "nameonly"], "write NAME=PATCH"),
        (["--variant", "official=x.patch"], "write NAME=PATCH"),
        (["--variant", "v=/no/such.patch"], "no such patch file"),
        (["--variant", "v=PATCH", "--variant", "v=PATCH"], "each name once"),
        (["--backend", "/no/such/src"], "needs model.py and utils/"),
        (["--backend", "UTILS_FILE"], "needs model.py and utils/"),
        (["--rounds", "0"], "a multiple of the 2 sides"),
        (["--variant", "v=PATCH", "--rounds", "4"], "a multiple of the 3 sides"),
        (["--c1-first", "--rounds", "6"], "a multiple of the 4 sides"),
        (["--out", "NOT_JSON"], "not a results file"),
        (["--out", "OTHER_RECORD", "--key", "before"], "holds another kind of record"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.patch").write_text("")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text("")
    (tmp_path / "src" / "utils").write_text("")  # a file where the folder belongs
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.json").write_text(json.dumps({"runs": {"before": {"ratio_c16": 0.97}}}))
    names = {"PATCH": tmp_path / "p.patch", "UTILS_FILE": tmp_path / "src",
             "NOT_JSON": tmp_path / "bad.json", "OTHER_RECORD": tmp_path / "other.json"}  # fmt: skip
    for placeholder, path in names.items():
        argv = [arg.replace(placeholder, str(path)) for arg in argv]
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_rounds_default_to_twice_the_sides(tmp_path: Path) -> None:
    (tmp_path / "p.patch").write_text("")
    opts = parse(["--variant", f"v={tmp_path / 'p.patch'}", "--out", str(tmp_path / "new.json")])
    assert opts.rounds == 6


def _reading(wall: float, **cpu: float) -> dict[str, float]:
    keys = ("frontend", "engine", "server", "client", "machine")
    return {"wall": wall, **{k: cpu.get(k, 0.0) for k in keys}}


def test_cores_used_are_cpu_seconds_over_the_wall_time_and_other_is_the_rest_of_the_machine() -> None:
    start = _reading(10.0, frontend=1.0, engine=5.0, machine=100.0)
    end = _reading(12.0, frontend=1.5, engine=7.0, server=0.2, client=0.4, machine=103.8)
    used = cores_used(start, end)
    assert used == {"frontend": 0.25, "engine": 1.0, "server": 0.1, "client": 0.2, "other": 0.35}


def test_each_side_is_compared_to_vllm_by_the_sums_of_its_rounds() -> None:
    sides = [Side("smollm2", "model"), Side("official", "backend"), Side(VLLM, "server")]
    one = {"frontend": 0.5, "engine": 1.0, "server": 0.1, "client": 0.2, "other": 0.0}
    tps = {"smollm2": [300.0, 330.0], "official": [310.0, 310.0], VLLM: [300.0, 300.0]}
    result = summary(sides, Measured(tps, {name: [one, one] for name in tps}))
    assert result["smollm2"]["vs_vllm_c16"] == 1.05 and result["smollm2"]["round_ratios"] == [1.0, 1.1]
    assert result["official"]["vs_vllm_c16"] == pytest.approx(1.033)
    assert result["official"]["cores_used"] == one
    row = "| smollm2 | 300, 330 | 1.050x | 1.00-1.10 | 0.50 / 1.00 / 0.10 / 0.20 / 0.00 |"
    assert row in backends_table(result)


def test_a_new_run_keeps_the_runs_before_it_whole() -> None:
    runs: dict[str, Any] = {}
    first = {"date": "d1", "cpu": "c", "sides": {"smollm2": {"vs_vllm_c16": 0.96, "source": {"patch": "p"}}}}
    keep(runs, "backends", first)
    keep(runs, "backends", {"date": "d2", "sides": {"smollm2": {"vs_vllm_c16": 1.06}}})
    keep(runs, "backends", {"date": "d3", "sides": {"smollm2": {"vs_vllm_c16": 1.0}}})
    assert runs["backends"]["date"] == "d3"
    assert [e["date"] for e in runs["backends"]["earlier"]] == ["d1", "d2"]
    assert runs["backends"]["earlier"][0] == first  # its source and rounds too
    assert all("earlier" not in e for e in runs["backends"]["earlier"])


def test_reads_adds_a_copy_of_the_model_measured_with_its_metrics_read(tmp_path: Path) -> None:
    sides = write_repo(tmp_path / "repo", tmp_path, None, {}, reads=True)
    assert [(s.name, s.reads_metrics) for s in sides] == [("smollm2", False), (READS, True), (VLLM, False)]
    model = tmp_path / "repo" / READS / "1" / "model.py"
    assert model.read_text() == (tmp_path / "repo" / "smollm2" / "1" / "model.py").read_text()


def test_c1_first_adds_a_copy_of_the_model_measured_with_bench_llms_whole_load(tmp_path: Path) -> None:
    sides = write_repo(tmp_path / "repo", tmp_path, None, {}, c1_first=True)
    assert [(s.name, s.c1_first) for s in sides] == [
        ("smollm2", False),
        (C1_FIRST, True),
        (VLLM_C1_FIRST, True),
        (VLLM, False),
    ]
    assert (tmp_path / "repo" / C1_FIRST / "1" / "model.py").is_file()
    assert not (tmp_path / "repo" / VLLM_C1_FIRST).exists()  # vLLM's server, measured twice


def test_c1_first_sides_are_also_compared_with_the_same_load_on_vllm() -> None:
    sides = [Side("smollm2", ""), Side(C1_FIRST, "", c1_first=True),
             Side(VLLM_C1_FIRST, "", c1_first=True), Side(VLLM, "")]  # fmt: skip
    tps = {
        "smollm2": [100.0, 100.0],
        C1_FIRST: [90.0, 90.0],
        VLLM_C1_FIRST: [90.0, 110.0],
        VLLM: [100.0, 100.0],
    }
    out = summary(sides, Measured(tps, {name: [] for name in tps}))
    assert out[C1_FIRST]["vs_vllm_c16"] == 0.9 and out[C1_FIRST]["vs_vllm_c1_first_c16"] == 0.9
    assert out[VLLM_C1_FIRST]["vs_vllm_c16"] == 1.0 and "vs_vllm_c1_first_c16" not in out[VLLM_C1_FIRST]
    assert "vs_vllm_c1_first_c16" not in out["smollm2"]
