"""bench.llm's arithmetic: row 2 from the alternated rounds, rounds the client bunched left out."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.llm import best_point, measured, rows, streamed_ttft, vs_medians, vs_rounds


def _point(tps: float, ttft: float, bunched: int = 0) -> dict[str, Any]:
    return {"output_tokens_per_s": tps, "ttft_ms_p50": ttft, "latency_ms_p50": 1000.0,
            "bunched_requests": bunched}  # fmt: skip


def _side(tps: list[float], ttft: list[float | None]) -> dict[str, Any]:
    return {"round_tps_c16": tps, "round_ttft_ms_c1": ttft, "c1": _point(50, 40),
            "c16": _point(max(tps), 400)}  # fmt: skip


def test_tokens_per_second_compares_the_sums_of_the_rounds_not_the_best() -> None:
    m = {"triton": _side([380, 420], [40, 40]), "vllm_openai": _side([400, 400], [40, 40])}
    ratio, note = vs_rounds(m, "round_tps_c16", 420, 400)
    assert ratio == pytest.approx(1.0) and "2 rounds' sums, rounds 0.95-1.05" in note


def test_a_record_without_rounds_compares_the_best_rounds() -> None:
    m = {"triton": {}, "vllm_openai": {}}
    assert vs_rounds(m, "round_tps_c16", 420, 400) == (pytest.approx(1.05), "")
    assert vs_medians(m, "round_ttft_ms_c1", 44, 40) == (pytest.approx(1.1), "")


def test_ttft_leaves_out_the_rounds_the_client_bunched() -> None:
    assert streamed_ttft(_point(50, 1100, bunched=3)) is None
    assert streamed_ttft(_point(50, 42)) == 42
    m = {"triton": _side([400] * 3, [44, None, 46]), "vllm_openai": _side([400] * 3, [40, 40, 40])}
    ratio, note = vs_medians(m, "round_ttft_ms_c1", 1100, 40)
    assert ratio == pytest.approx(45 / 40) and "1 bunched round(s) left out" in note
    none = {"triton": _side([400], [None]), "vllm_openai": _side([400], [40])}
    assert math.isnan(vs_medians(none, "round_ttft_ms_c1", 1100, 40)[0])


def test_the_best_round_is_one_that_streamed() -> None:
    bunched, streamed = _point(420, 1100, bunched=6), _point(400, 44)
    assert best_point([bunched, streamed]) is streamed
    assert best_point([bunched]) is bunched  # none streamed: still a point to show


def test_row_2_fails_below_parity_and_names_the_spread() -> None:
    m = {"triton": _side([380, 390], [40, 40]), "vllm_openai": _side([400, 400], [40, 40]),
         "naive": {"c16": _point(40, 900)}}  # fmt: skip
    row = next(r for r in rows(m) if r[0].startswith("2. vs vLLM's own server: tokens/s"))
    assert row[1].startswith("0.96x (2 rounds' sums, rounds 0.95-0.97;") and row[3] is False


def test_an_earlier_file_is_read_in_either_shape() -> None:
    inner = {"triton": {"c1": {}}}
    assert measured({"machine": {}, "results": {"date": "d", "results": inner}}) == inner
    assert measured({"date": "d", "results": inner}) == inner
