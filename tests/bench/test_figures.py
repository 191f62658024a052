"""bench.figures: every figure block of README.md and docs/*.md says what its results file holds."""

import json
from pathlib import Path
from typing import Any

import pytest

from bench.figures import RESULTS, ROOT, FiguresError, main, run

MACHINE = {
    "date": "2026-01-02 03:04 UTC",
    "cpu": "Test CPU",
    "cores": 4,
    "cpu_flags": ["avx2", "avx512f"],
    "python": "3.11.7",
    "versions": {"numpy": "1.26.4"},
    "load_avg": [0.5, 0.25, 0.125],
}
QUEUE_BOUND = {
    "machine": MACHINE,
    "rows": [],
    "results": {
        "queue_timeout_s": 5.0,
        "overload": {
            "sent": 3000,
            "concurrency": 200,
            "succeeded": 170,
            "rejected": 2830,
            "lost": 0,
            "latency_ms": {"all": {"p99": 4001.8}},
        },
        "concurrency_1": {"ratio": 0.933},
    },
}
STALE = """# Project

Before.

<!-- figures: queue_bound -->
3000 requests ended as 92 results and 2908 refusals, p99 3.6 s; 0.999x at concurrency 1.
<!-- /figures -->

After.
"""


def tree(tmp_path: Path, readme: str) -> tuple[Path, Path]:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "queue_bound.json").write_text(json.dumps(QUEUE_BOUND))
    (tmp_path / "README.md").write_text(readme)
    return tmp_path, results


def test_every_committed_block_matches_its_results_file() -> None:
    stale = run(ROOT, RESULTS, check=True)
    assert not stale, "stale figures (run .venv/bin/python -m bench.figures): " + "; ".join(stale)


def test_a_stale_block_is_named_then_rewritten_from_its_results_file(tmp_path: Path) -> None:
    root, results = tree(tmp_path, STALE)

    assert run(root, results, check=True) == ["README.md: block 'queue_bound'"]
    assert (root / "README.md").read_text() == STALE  # --check writes nothing

    assert run(root, results, check=False) == ["README.md: block 'queue_bound'"]
    text = (root / "README.md").read_text()
    assert "170 results and 2830 refusals" in text and "p99 4.0 s" in text and "0.933x" in text
    assert "2908" not in text and "0.999x" not in text
    assert "2026-01-02 03:04 UTC; CPU Test CPU, flags avx2, avx512f, cores 4" in text
    assert "load average 0.5 / 0.25 / 0.125" in text and "numpy 1.26.4" in text
    assert text.startswith("# Project\n\nBefore.\n\n") and text.endswith("<!-- /figures -->\n\nAfter.\n")
    assert run(root, results, check=True) == []


def test_a_missing_field_says_what_was_not_recorded(tmp_path: Path) -> None:
    root, results = tree(tmp_path, STALE)
    bare = {k: v for k, v in QUEUE_BOUND.items() if k != "machine"}
    (results / "queue_bound.json").write_text(json.dumps(bare))
    run(root, results, check=False)
    assert "CPU not recorded, flags not recorded, cores not recorded" in (root / "README.md").read_text()


@pytest.mark.parametrize(
    ("readme", "message"),
    [
        ("<!-- figures: nonesuch -->\n<!-- /figures -->\n", "unknown figures block 'nonesuch'"),
        ("<!-- figures: queue_bound -->\nno end\n", "block 'queue_bound' has no <!-- /figures -->"),
        ("<!-- figures: rows absent -->\n<!-- /figures -->\n", "no such results file"),
    ],
)
def test_a_bad_block_is_one_error_naming_the_file(tmp_path: Path, readme: str, message: str) -> None:
    root, results = tree(tmp_path, readme)
    with pytest.raises(FiguresError, match=r"README\.md") as caught:
        run(root, results, check=False)
    assert message in str(caught.value)
    assert (root / "README.md").read_text() == readme


def test_check_exits_1_on_a_stale_tree_and_0_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, results = tree(tmp_path, STALE)
    monkeypatch.setattr("bench.figures.ROOT", root)
    monkeypatch.setattr("bench.figures.RESULTS", results)
    assert main(["--check"]) == 1
    assert main([]) == 0
    assert main(["--check"]) == 0


def test_the_backends_block_shows_every_variants_run_and_refuses_a_file_without_one(tmp_path: Path) -> None:
    from bench.figures import CORE_KEYS, Result, render_llm_backends

    side = {"round_tps_c16": [300.0, 310.0], "round_ratios": [1.0, 1.03], "vs_vllm_c16": 1.017,
            "cores_used": dict.fromkeys(CORE_KEYS, 0.1)}  # fmt: skip
    run = {**MACHINE, "dtype_reason": "f32", "minutes": 3.0, "load_avg_after": [1.0], "sides": {"m": side}}
    runs = {"a": run, "old": {"x": 1}, "b": run}
    text = render_llm_backends([Result("llm_per_token", {"runs": runs})], tmp_path)
    assert text.count("| m | 300, 310 | 1.017x | 1.00-1.03 |") == 2
    assert "`runs.a`" in text and "`runs.b`" in text and "`runs.old`" not in text
    with pytest.raises(FiguresError, match=r"no bench\.llm_variants record"):
        render_llm_backends([Result("llm_per_token", {"runs": {"old": {"x": 1}}})], tmp_path)


def runtimes_record() -> dict[str, Any]:
    def side(variant: str, runtime: str, c1: float, c8: float) -> dict[str, Any]:
        points = {"1": {"throughput": c1}, "8": {"throughput": c8}}
        return {"model": "m", "variant": variant, "runtime": runtime, "points": points}

    def local(variant: str, runtime: str, c1: float, c8: float) -> dict[str, Any]:
        return {"variant": variant, "runtime": runtime, "best": {"1": c1, "8": c8}}

    runner = {"executes": 90, "execute": {"mean": 2.5}, "run": {"p50": 2.0, "p99": 9.0, "mean": 2.4}}
    model = {
        "served": {**side("int8_openvino", "openvino", 400.0, 600.0), "runner_ms": runner},
        "ort_served": side("fp32", "onnxruntime", 100.0, 150.0),
        "in_process": {"onnxruntime": local("fp32", "onnxruntime", 110.0, 160.0),
                       "openvino": local("int8_openvino", "openvino", 450.0, 700.0)},
        "fastest_in_process_c1": "openvino",
        "served_vs_fastest_in_process_c1": 400 / 450,
        "served_vs_ort_served": {"1": 4.0, "8": 4.0},
        "load_avg_before": [1.5, 2.0, 2.5],
        "limit": {"flops_per_call": 3.6e9, "precision": "int8", "floor_ms": 0.34,
                  "peak": {"how": "int8 on amx_int8: 2048 FLOP/cycle/core x 2 cores x 2.6 GHz"},
                  "served_of_peak": {"1": 0.135, "8": 0.203}},
    }  # fmt: skip
    host = {"ghz": 2.6, "cores": 2, "clock_from": "/proc/cpuinfo 'cpu MHz'"}
    results = {"host": host, "beside": [{"name": "pytest", "cores": 0.9}], "models": {"resnet18": model}}
    rows = [{"benchmark": "6. CPU runtimes: resnet18", "measured": "0.89", "target": ">= 0.85", "met": True}]
    return {"machine": MACHINE, "rows": rows, "results": results}


def test_the_runtimes_block_shows_every_side_the_ratios_and_the_limit(tmp_path: Path) -> None:
    from bench.figures import Result, render_cpu_runtimes

    text = render_cpu_runtimes([Result("cpu_runtimes", runtimes_record())], tmp_path)
    assert (
        "| resnet18 | `int8_openvino` | 400 / 600 | 100 / 150 (`fp32`) | 110 / 160 (`fp32`) | "
        "450 / 700 (`int8_openvino`) | 0.89 (openvino) | 4.00x / 4.00x |"
    ) in text
    assert "| resnet18 | int8 | 3.60 | int8 on amx_int8: 2048 FLOP/cycle/core" in text
    assert "| 0.34 ms | 1440, 13.5 % | 2160, 20.3 % |" in text
    assert "resnet18 1.5 / 2.0 / 2.5" in text and "pytest 0.90" in text and "2.6 GHz" in text
    assert (
        "| resnet18 | `m` | 2.50 | 2.50 (90 executes) | 2.00 / 9.00 / 2.40 | 2.22 (`int8_openvino`) |" in text
    )
    assert "| 6. CPU runtimes: resnet18 | 0.89 | >= 0.85 | yes |" in text
    assert "| resnet18 | not measured in this run |" in text  # a record from before the sizing's rows


def test_the_runtimes_block_shows_the_served_model_against_its_sizing_and_every_core(tmp_path: Path) -> None:
    from bench.figures import Result, render_cpu_runtimes

    record = runtimes_record()
    model = record["results"]["models"]["resnet18"]
    model["served"]["served_at"] = {"instances": 1, "threads": 2}
    fastest = {"variant": "bf16_openvino", "threads": 2, "c1_ms": 1.88, "best_rate": 520.0, "best_batch": 16}
    model["sized"] = {"served_c1_ms": 3.0, "same_sizing_c1_ms": 2.1, "serving_path_ms": 0.9,
                      "serving_path_share": 0.3, "fastest": fastest, "c1_extra_ms": 1.12, "served_c8": 400.0,
                      "c8_share": 400 / 520}  # fmt: skip
    text = render_cpu_runtimes([Result("cpu_runtimes", record)], tmp_path)
    assert (
        "| resnet18 | `int8_openvino` 1 x 2 threads | 3.00 ms | 2.10 ms | 0.90 ms (30 %) | 1.88 ms "
        "(`bf16_openvino`, 2 threads) | +1.12 ms | 400/s | 520/s (batch 16) | 0.77 |"
    ) in text


def test_a_benchmark_from_another_run_gets_its_own_header_in_the_run_table(tmp_path: Path) -> None:
    from bench.figures import Result, render_bench_run

    row = {"benchmark": "b", "measured": "1", "target": "-", "met": None}
    other = {**MACHINE, "date": "2026-02-03 04:05 UTC", "cpu": "Other CPU"}
    machines = {"a": MACHINE, "b": other, "c": MACHINE}
    results = [Result(name, {"machine": m, "rows": [row]}) for name, m in machines.items()]
    text = render_bench_run(results, tmp_path)
    assert text.count("*Measured") == 2
    first, second = text.split("\n\n*Measured 2026-02-03 04:05 UTC; CPU Other CPU")
    assert "`bench/results/a.json`, `bench/results/c.json`" in first
    assert "`bench/results/b.json`" in second


def test_the_int8_search_block_has_a_row_per_model_and_method(tmp_path: Path) -> None:
    line = "[det] variant int8: search: minmax asymmetric, 2 nodes in float"
    found = {"passed": True, "mean_cosine": 0.99, "min_cosine": 0.97, "float_nodes": 2, "seconds": 40.0,
             "ms": 2.5, "line": line}  # fmt: skip
    plain = {
        "passed": False,
        "mean_cosine": 0.959,
        "min_cosine": 0.84,
        "float_nodes": 0,
        "seconds": 3.0,
        "ms": 2.0,
    }
    methods = {"ort_minmax": plain, "nncf_ac": {"error": "ValueError: no"}, "search": found}
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    data = {"machine": MACHINE, "rows": [], "results": {"tolerance": {"min_cosine": 0.95},
            "models": {"det": {"what": "a detector", "fp32_ms": 4.0, "methods": methods}}}}  # fmt: skip
    (results / "int8_search.json").write_text(json.dumps(data))
    (tmp_path / "README.md").write_text("<!-- figures: int8_search -->\n<!-- /figures -->\n")
    assert run(tmp_path, results, check=False) == ["README.md: block 'int8_search'"]
    text = (tmp_path / "README.md").read_text()
    assert (
        "| det | ORT quantize_static, minmax, symmetric | **no** | 0.9590 / 0.8400 | 0 | 3.0 | 2.00 (4.00) |"
        in text
    )
    assert "| det | NNCF quantize_with_accuracy_control | refused: ValueError: no |" in text
    assert "| det | tritonforge's INT8 search | yes | 0.9900 / 0.9700 | 2 | 40.0 | 2.50 (4.00) |" in text
    assert "`search: minmax asymmetric, 2 nodes in float`" in text
