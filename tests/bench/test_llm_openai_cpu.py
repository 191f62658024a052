"""bench.llm_openai_cpu: the processes each side counts, CPU per token from the rounds' sums, the
summary row against its target and the figure block."""

import argparse

import pytest

from bench.figures import Result, render_llm_openai_cpu, render_llm_openai_cpu_runs
from bench.llm_openai_cpu import Pids, Reading, model_json_arg, rows, summary

PIDS = Pids(vllm=10, endpoint=20, server=30, stub=40)


def test_each_side_counts_its_own_serving_processes_and_its_engine_apart() -> None:
    assert PIDS.serving("vllm") == (10,)
    assert PIDS.serving("openai") == (20, 30, 40)
    assert PIDS.serving("grpc") == (30, 40)
    assert PIDS.engine_root("vllm") == 10 and PIDS.engine_root("openai") == PIDS.engine_root("grpc") == 40


def _done(openai_endpoint: float) -> dict[str, list[Reading]]:
    openai = {"endpoint": openai_endpoint, "tritonserver": 0.1, "stub": 0.2}
    return {
        "vllm": [Reading(1000, 200.0, {"api_server": 0.1}, 5.0, 6.0),
                 Reading(3000, 210.0, {"api_server": 0.5}, 15.0, 16.0)],
        "openai": [Reading(2000, 190.0, openai, 11.0, 12.0)],
        "grpc": [Reading(2000, 195.0, {"tritonserver": 0.1, "stub": 0.2}, 10.0, 11.0)],
    }  # fmt: skip


def test_cpu_per_token_comes_from_the_rounds_sums_per_process() -> None:
    sides = summary(_done(openai_endpoint=0.3))
    assert sides["vllm"]["serving_us_per_token"] == pytest.approx(150.0)  # 0.6 s / 4000 tokens
    assert sides["vllm"]["round_serving_us_per_token"] == [100.0, pytest.approx(166.7)]
    assert sides["openai"]["by_process_us_per_token"] == {
        "endpoint": 150.0,
        "tritonserver": 50.0,
        "stub": 100.0,
    }
    assert sides["openai"]["serving_us_per_token"] == 300.0 and sides["openai"]["vs_vllm"] == 2.0
    assert sides["openai"]["engine_core_us_per_token"] == 5500.0  # counted apart, never in serving
    assert sides["grpc"]["vs_vllm"] == 1.0


def test_the_row_meets_its_target_at_twice_vllms_cost_and_not_above() -> None:
    (row,) = rows(summary(_done(openai_endpoint=0.3)))
    assert row.met is True and row.measured.startswith("2.00x (300 / 150 µs; gRPC path 150 µs)")
    (row,) = rows(summary(_done(openai_endpoint=0.302)))
    assert row.met is False


def test_model_json_settings_are_json_values() -> None:
    assert model_json_arg("stream_interval=4") == ("stream_interval", 4)
    with pytest.raises(argparse.ArgumentTypeError):
        model_json_arg("stream_interval")


def test_the_figure_block_says_the_machine_the_setting_and_every_side() -> None:
    record = {
        "date": "2026-01-02 03:04 UTC", "cpu": "Test CPU", "cores": 2, "cpu_flags": ["avx2"],
        "load_avg": [1.5, 1.0, 0.5], "engine": {"dtype": "bfloat16"}, "stream_interval": 4,
        "model_json_extra": {}, "load": {"concurrency": [16], "output_tokens": 64}, "rounds": 3,
        "minutes": 4.2, "load_avg_after": [2.0, 1.5, 1.0], "sides": summary(_done(openai_endpoint=0.3)),
    }  # fmt: skip
    rows_saved = [vars(r) for r in rows(record["sides"])]  # type: ignore[arg-type]
    text = render_llm_openai_cpu([Result("llm_openai_cpu", {"results": record, "rows": rows_saved})], None)  # type: ignore[arg-type]
    assert (
        "*Measured 2026-01-02 03:04 UTC; CPU Test CPU, flags avx2, cores 2; load average 1.5 / 1 / 0.5"
        in text
    )
    assert "stream_interval 4" in text and "| openai | 300 µs | 2.00x |" in text
    assert "endpoint 150, tritonserver 50, stub 100" in text and "| yes |" in text


def test_the_runs_block_lists_each_run_with_when_its_load_was_read() -> None:
    sides = summary(_done(openai_endpoint=0.3))
    run = {"date": "2026-01-02 03:04 UTC", "cpu": "Test CPU", "load_avg": [3.0, 2.0, 1.0], "sides": sides}
    runs = {
        "before": {**run, "what": "as it was", "note": "read when the run ended"},
        "after": {**run, "what": "x"},
    }
    text = render_llm_openai_cpu_runs([Result("llm_openai_cpu_runs", {"runs": runs})], None)  # type: ignore[arg-type]
    assert "load averages in the table" in text
    assert "| `before` | 2026-01-02 03:04 UTC (3.0 / 2.0 / 1.0 at its end) | as it was | 300 µs |" in text
    assert "(3.0 / 2.0 / 1.0 at its start) | x | 300 µs | 150 µs | 150 µs | 2.00x |" in text


def test_the_stream_figures_come_from_the_gaps_between_text_updates_over_the_rounds() -> None:
    from bench.llm_openai_cpu import stream_figures

    one = Reading(64, 30.0, {}, 0.0, 1.0, gaps_ms=(10.0,) * 9 + (100.0,), updates=11, ttft_ms_p50=50.0)
    two = Reading(64, 40.0, {}, 0.0, 1.0, gaps_ms=(20.0,), updates=2, ttft_ms_p50=70.0)
    got = stream_figures([one, two])
    assert got["gap_ms_p50"] == 10.0 and got["gap_ms_p90"] == 20.0  # one long gap in eleven: above p90
    assert got["tokens_per_update"] == round(128 / 13, 2) and got["ttft_ms_p50"] == 60.0
    assert got["tokens_per_s"] == 35.0 and got["tokens_per_wall_s"] == 64.0
