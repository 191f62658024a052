"""bench.llm_aiperf: aiperf's export read, its command line, the rows and the figure block."""

import json
from pathlib import Path
from typing import Any

import pytest

from bench import llm_aiperf
from bench.figures import Result, render_llm_aiperf
from bench.llm_aiperf import AiperfError, Figures, aiperf_command, own_figures, parse_export, rows

# A real profile_export_aiperf.json of aiperf 0.13.0, trimmed to the fields read and a few more.
SAMPLE = Path(__file__).parent / "data" / "aiperf_profile_export.json"
# (tritonforge's OpenAI endpoint, 16 streams, from the run in bench/results/llm_aiperf.json).
SAMPLE_CONCURRENCY, SAMPLE_REQUESTS = 16, 64
SAMPLE_TTFT, SAMPLE_ITL, SAMPLE_TPS = 1540.184524, 164.46987664285712, 94.92091177186703


def test_a_real_export_gives_ttft_itl_and_tokens_per_second() -> None:
    got = parse_export(SAMPLE)

    assert got == Figures(
        concurrency=SAMPLE_CONCURRENCY,
        requests=SAMPLE_REQUESTS,
        ttft_ms_p50=pytest.approx(SAMPLE_TTFT),  # type: ignore[arg-type]
        itl_ms_p50=pytest.approx(SAMPLE_ITL),  # type: ignore[arg-type]
        output_tokens_per_s=pytest.approx(SAMPLE_TPS),  # type: ignore[arg-type]
        output_tokens_mean=64.0,
    )


def _edited(tmp_path: Path, change: dict[str, Any]) -> Path:
    data = json.loads(SAMPLE.read_text())
    data.update(change)
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps(data))
    return path


def test_a_missing_metric_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = _edited(tmp_path, {"time_to_first_token": {"unit": "ms", "avg": 1.0}})

    with pytest.raises(AiperfError, match=r"profile_export_aiperf.json: no 'time_to_first_token.p50'"):
        parse_export(path)


def test_failed_requests_are_not_averaged_away(tmp_path: Path) -> None:
    path = _edited(tmp_path, {"error_summary": [{"error_details": {"code": 400}, "count": 3}]})

    with pytest.raises(AiperfError, match="failed requests"):
        parse_export(path)


def test_an_unreadable_export_says_so(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{")

    with pytest.raises(AiperfError, match="cannot read aiperf's export"):
        parse_export(tmp_path / "x.json")


def test_the_command_sends_the_own_loads_requests_and_sampling(tmp_path: Path) -> None:
    exe, data = Path("/v/bin/aiperf"), Path("/p.jsonl")
    cmd = aiperf_command(exe, "127.0.0.1:9000", Path("/ckpt"), data, 16, tmp_path)
    flags = " ".join(cmd)

    assert cmd[:2] == ["/v/bin/aiperf", "profile"]
    assert "--url http://127.0.0.1:9000 --endpoint-type completions --streaming" in flags
    assert "--tokenizer /ckpt --input-file /p.jsonl --custom-dataset-type single_turn" in flags
    assert "max_tokens:64" in cmd and "ignore_eos:true" in cmd and "temperature:0" in cmd
    assert "--concurrency 16 --request-count 64" in flags  # 16 at one stream, 64 at 16
    assert f"--artifact-dir {tmp_path}" in flags and "--use-server-token-count" in cmd


def test_the_own_figures_come_from_the_perf_point() -> None:
    point = {"concurrency": 1, "requests": 16, "output_tokens": 1024, "ttft_ms_p50": 40.0,
             "itl_ms_p50": 16.5, "output_tokens_per_s": 58.0}  # fmt: skip

    assert own_figures(point) == Figures(1, 16, 40.0, 16.5, 58.0, 64.0)


def _figures(c: int, ttft: float, itl: float, tps: float) -> dict[str, Any]:
    return {"concurrency": c, "requests": 16 if c == 1 else 64, "ttft_ms_p50": ttft, "itl_ms_p50": itl,
            "output_tokens_per_s": tps, "output_tokens_mean": 64.0}  # fmt: skip


MEASURED = {
    "load_avg_before": [1.5, 1.25, 1.0],
    "tritonforge": {
        "own": {"c1": _figures(1, 40, 16.0, 58), "c16": _figures(16, 90, 30.0, 400)},
        "aiperf": {"c1": _figures(1, 44, 16.4, 57), "c16": _figures(16, 95, 31.0, 380)},
    },
    "vllm": {
        "own": {"c1": _figures(1, 35, 15.0, 60), "c16": _figures(16, 80, 29.0, 420)},
        "aiperf": {"c1": _figures(1, 35, 15.2, 60), "c16": _figures(16, 82, 29.5, 441)},
    },
}


def test_rows_put_aiperf_over_the_own_figures_per_server() -> None:
    got = {r[0]: r[1] for r in rows(MEASURED)}

    assert got["aiperf cross-check (tritonforge): tokens/s at c16, aiperf / own"] == "0.95x (380 / 400)"
    assert got["aiperf cross-check (tritonforge): TTFT p50 at c1, aiperf / own"] == "1.10x (44 / 40 ms)"
    assert got["aiperf cross-check (vllm): tokens/s at c16, aiperf / own"] == "1.05x (441 / 420)"
    assert len(got) == 6  # and the endpoint over vLLM's server at c1 and c16


def test_rows_put_the_endpoint_over_vllms_server_with_the_target_at_4_streams() -> None:
    at_four = {"tritonforge": _figures(4, 60, 20.0, 190), "vllm": _figures(4, 50, 19.0, 200)}
    four = {
        side: {tool: dict(points, c4=at_four[side]) for tool, points in MEASURED[side].items()}
        for side in at_four
    }
    got = {r[0]: r[1:] for r in rows(four)}

    at4 = got["aiperf at c4: tritonforge's OpenAI endpoint / vLLM's own server"]
    assert at4 == (
        "tokens/s 0.95x (190 / 200), TTFT p50 1.20x (60 / 50 ms), ITL p50 1.05x (20.0 / 19.0 ms)",
        "tokens/s >= 0.95x", True,
    )  # fmt: skip
    at16 = got["aiperf at c16: tritonforge's OpenAI endpoint / vLLM's own server"]
    assert at16[0].startswith("tokens/s 0.86x (380 / 441)") and at16[1:] == ("recorded", None)


def test_the_block_shows_both_tools_side_by_side(tmp_path: Path) -> None:
    record = llm_aiperf.record(MEASURED, None) | {"date": "2026-01-02 03:04 UTC"}
    saved = {"machine": {"cpu": "Test CPU", "cores": 2}, "rows": [
        {"benchmark": b, "measured": m, "target": t, "met": ok} for b, m, t, ok in rows(MEASURED)
    ], "results": record}  # fmt: skip

    text = render_llm_aiperf([Result("llm_aiperf", saved)], tmp_path)

    assert text.startswith("*Measured 2026-01-02 03:04 UTC; CPU Test CPU")
    assert "load average 1.5 / 1.25 / 1 at start" in text
    tf, vllm = "| tritonforge (Triton + `vllm_engine`) |", "| vLLM's own server |"
    assert f"{tf} own (perf_analyzer, gRPC) | 16 | 64 | 90 ms | 30.0 ms | 400 |" in text
    aiperf = f"aiperf {llm_aiperf.AIPERF_VERSION}"
    assert f"{tf} {aiperf}, the project's OpenAI endpoint | 1 | 16 | 44 ms | 16.4 ms | 57 |" in text
    assert f"{vllm} {aiperf}, `/v1/completions` | 16 | 64 | 82 ms | 29.5 ms | 441 |" in text
    row = "| aiperf cross-check (vllm): TTFT p50 at c1, aiperf / own | 1.00x (35 / 35 ms) | recorded | - |"
    assert row in text


def test_a_skipped_run_renders_its_reason(tmp_path: Path) -> None:
    saved = {"rows": [], "results": llm_aiperf.record(None, "vllm is not importable in this interpreter")}

    text = render_llm_aiperf([Result("llm_aiperf", saved)], tmp_path)

    assert text.endswith("Skipped: vllm is not importable in this interpreter.")
