"""The perf wrapper's LLM mode: profile-export parsing and statistics on a real recorded export
(``fixtures/llm_profile_export.json``: perf_analyzer 2.48, streaming gRPC, the ``vllm_engine`` model,
concurrency 2, 4 requests of 8 tokens with ``ignore_eos``), the vllm:* metrics, report and gate;
then the whole mode against the real server (needs vLLM in the running interpreter)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from clients.perf import llm_metrics, profile_export
from clients.perf.errors import PerfError
from clients.perf.inputs import _from_config
from clients.perf.llm_prompts import Prompt, input_data, load_chats
from clients.perf.llm_report import LLMPoint, LLMReport, compare, markdown, write_all
from clients.perf.llm_stats import percentile, stream_stats
from clients.perf.profile_export import Experiment, StreamedRequest
from tests.conftest import test_cache_dir

FIXTURES = Path(__file__).parent / "fixtures"
EXPORT = FIXTURES / "llm_profile_export.json"
ROOT = Path(__file__).parents[3]


def test_the_recorded_export_parses_into_requests_with_every_response() -> None:
    (experiment,) = profile_export.load(EXPORT)
    assert (experiment.mode, experiment.value, experiment.unanswered) == ("concurrency", 2.0, 0)
    assert len(experiment.requests) == 4
    raw = json.loads(EXPORT.read_text())["experiments"][0]["requests"]
    for request, entry in zip(experiment.requests, raw, strict=True):
        assert request.send_ns == entry["timestamp"]
        assert list(request.response_ns) == entry["response_timestamps"]
        assert request.tokens == (1,) * 8  # num_output_tokens: raw uint32 bytes, one token per step
        assert request.output_tokens == 8


def test_tokens_per_response_from_the_model_count_or_one_per_text_piece() -> None:
    assert profile_export.response_tokens({"num_output_tokens": "\u0003\u0000\u0000\u0000"}) == 3
    assert profile_export.response_tokens({"text_output": " the", "num_output_tokens": ""}) == 1
    assert profile_export.response_tokens({"text_output": ""}) == 0


def test_statistics_match_numpy_on_the_recorded_export() -> None:
    (experiment,) = profile_export.load(EXPORT)
    stats = stream_stats(experiment)
    reqs = experiment.requests
    ttft = np.array([(r.response_ns[0] - r.send_ns) / 1e6 for r in reqs])
    itl = np.concatenate([np.diff(np.array(r.response_ns)) / 1e6 for r in reqs])
    latency = np.array([(r.response_ns[-1] - r.send_ns) / 1e6 for r in reqs])
    assert len(itl) == 4 * 7
    assert stats.ttft_ms_p50 == pytest.approx(np.percentile(ttft, 50))
    assert stats.ttft_ms_p99 == pytest.approx(np.percentile(ttft, 99))
    assert stats.itl_ms_p50 == pytest.approx(np.percentile(itl, 50))
    assert stats.itl_ms_p99 == pytest.approx(np.percentile(itl, 99))
    assert stats.latency_ms_p50 == pytest.approx(np.percentile(latency, 50))
    span = (max(r.response_ns[-1] for r in reqs) - min(r.send_ns for r in reqs)) / 1e9
    assert stats.output_tokens == 32 and stats.output_tokens_per_s == pytest.approx(32 / span)
    assert stats.requests_per_s == pytest.approx(4 / span)
    assert 0 < stats.ttft_ms_p50 <= stats.ttft_ms_p99 <= stats.latency_ms_p99


def test_a_response_carrying_several_tokens_gives_each_its_share_of_the_gap() -> None:
    ms = 1_000_000
    coalesced = StreamedRequest(0, (10 * ms, 90 * ms, 120 * ms, 125 * ms), (1, 8, 3, 0))
    assert coalesced.itl_s == pytest.approx([0.010] * 11)  # the empty final response: no token
    assert coalesced.output_tokens == 12 and coalesced.latency_s == pytest.approx(0.125)


def test_a_request_whose_responses_came_in_one_bunch_is_counted_and_reported() -> None:
    (experiment,) = profile_export.load(EXPORT)
    assert stream_stats(experiment).bunched_requests == 0  # the recorded export streams
    t0 = experiment.requests[0].send_ns
    held = StreamedRequest(t0, tuple(t0 + 900_000_000 + i * 10_000 for i in range(8)), (1,) * 8)
    paced = StreamedRequest(t0, tuple(t0 + 20_000_000 * (i + 1) for i in range(8)), (1,) * 8)
    short = StreamedRequest(t0, (t0 + 5_000_000, t0 + 5_100_000), (1, 1))  # too few to tell
    stats = stream_stats(Experiment("concurrency", 1.0, (held, paced, short), 0))
    assert stats.bunched_requests == 1
    report = LLMReport("m", "u", {"output_tokens": 8}, [LLMPoint(1, stats, None)])
    assert "Concurrency 1: 1 of 3 requests reached the client in one bunch" in markdown(report)
    streamed = dataclasses.replace(stats, bunched_requests=0)
    plain = LLMReport("m", "u", {"output_tokens": 8}, [LLMPoint(1, streamed, None)])
    assert "bunch" not in markdown(plain)


def test_percentile_interpolates_and_is_nan_for_nothing() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_an_export_that_is_not_one_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "2.48.0"}')
    with pytest.raises(PerfError, match=r"bad\.json: not a perf_analyzer profile export"):
        profile_export.load(bad)


def test_requests_without_responses_are_counted_not_kept(tmp_path: Path) -> None:
    raw = json.loads(EXPORT.read_text())
    raw["experiments"][0]["requests"][1]["response_timestamps"] = []
    path = tmp_path / "export.json"
    path.write_text(json.dumps(raw))
    (experiment,) = profile_export.load(path)
    assert len(experiment.requests) == 3 and experiment.unanswered == 1


def test_vllm_histograms_and_refusals_over_a_point() -> None:
    text = (FIXTURES / "llm_metrics.txt").read_text()
    after = llm_metrics.parse(text, "smollm2")
    ttft = after.histograms[llm_metrics.TTFT]
    line = next(li for li in text.splitlines() if li.startswith("vllm:time_to_first_token_seconds_count"))
    assert ttft.count == float(line.rsplit(" ", 1)[1]) > 0
    assert ttft.buckets[math.inf] == ttft.count
    stats = llm_metrics.server_stats(llm_metrics.ModelMetrics(), after)
    assert stats.ttft_ms_mean == pytest.approx(1000 * ttft.total / ttft.count)
    assert stats.ttft_ms_p50_bound <= stats.ttft_ms_p99_bound
    assert stats.refused == 0 and stats.requests > 0
    assert not llm_metrics.parse(text, "other").histograms


def _report(tokens_per_s: float, ttft_p99: float) -> LLMReport:
    (experiment,) = profile_export.load(EXPORT)
    stats = dataclasses.replace(
        stream_stats(experiment), output_tokens_per_s=tokens_per_s, ttft_ms_p99=ttft_p99
    )
    return LLMReport("smollm2", "127.0.0.1:8001", {"output_tokens": 8}, [LLMPoint(2, stats)])


def test_report_files_round_trip_and_the_gate(tmp_path: Path) -> None:
    report = _report(100.0, 500.0)
    files = write_all(report, tmp_path)
    assert all(Path(f).stat().st_size > 0 for f in files.values())
    again = LLMReport.load(Path(files["json"]))
    assert again.points[0].client == report.points[0].client
    assert "| 2 | 100.0 |" in Path(files["md"]).read_text()
    assert compare(report, again) == []
    slower = compare(_report(80.0, 700.0), again)
    assert len(slower) == 2 and "fell below 100.0" in slower[0] and "rose above 500.0" in slower[1]
    with pytest.raises(PerfError, match="model 'smollm2'"):
        compare(dataclasses.replace(report, model="other"), again)


def test_an_llm_is_told_apart_from_its_served_config() -> None:
    config = {"max_batch_size": 0, "model_transaction_policy": {"decoupled": True},
              "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}]}  # fmt: skip
    assert _from_config("m", config).is_llm
    assert not _from_config("m", {**config, "model_transaction_policy": {}}).is_llm


def test_prompts_and_their_input_data(tmp_path: Path) -> None:
    chats = load_chats(ROOT / "calibration" / "smollm2" / "perf.json")
    assert len(chats) >= 10
    data = input_data([Prompt("hi", -1)], 64)["data"][0]
    assert json.loads(data["sampling_parameters"][0]) == {
        "max_tokens": 64,
        "ignore_eos": True,
        "temperature": 0,
    }
    assert data["stream"] == [True] and data["return_num_output_tokens"] == [True]
    bad = tmp_path / "p.json"
    bad.write_text('[{"messages": [{"role": "user", "content": "a"}]}, {"messages": []}]')
    with pytest.raises(PerfError, match=r"p\.json: entry 1"):
        load_chats(bad)


# -- against the real server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm_server(llm_triton):  # type: ignore[no-untyped-def]
    """The ``vllm_engine`` model served for real: the session's shared LLM server."""
    return llm_triton


@pytest.mark.integration
def test_each_streamed_response_counts_its_tokens_with_ignore_eos(llm_server) -> None:  # type: ignore[no-untyped-def]
    """What the token count of the LLM mode rests on, checked with a direct tritonclient stream: the
    tokens of a response are those made while the one before was sent (one or several), each
    response with its own count, adding up to what was asked for."""
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(llm_server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put(error or result))
    fields = input_data([Prompt("Write a haiku about autumn leaves.", -1)], 12)["data"][0]
    inputs = []
    for name, (value,) in fields.items():
        is_text = isinstance(value, str)
        tensor = grpcclient.InferInput(name, [1], "BYTES" if is_text else "BOOL")
        tensor.set_data_from_numpy(
            np.array([value.encode() if is_text else value], np.object_ if is_text else bool)
        )
        inputs.append(tensor)
    client.async_stream_infer("smollm2", inputs, request_id="1", enable_empty_final_response=True)
    counts = []
    while True:
        result = results.get(timeout=300)
        assert not isinstance(result, Exception), result
        response = result.get_response()  # type: ignore[attr-defined]
        if response.outputs:
            counts.append(int(result.as_numpy("num_output_tokens")[0]))  # type: ignore[attr-defined]
        if response.parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    assert len(counts) >= 2 and min(counts) >= 1 and sum(counts) == 12, counts


@pytest.mark.integration
def test_the_llm_mode_against_the_real_server(llm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from clients.perf.llm import LLMLoad, run_llm_perf
    from clients.perf.llm_prompts import shape
    from tests.integration.fixtures.llm_repo import checkpoint as zoo_checkpoint

    checkpoint = zoo_checkpoint()
    prompts = shape(load_chats(ROOT / "calibration" / "smollm2" / "perf.json")[:6], checkpoint, 48)
    assert all(abs(p.tokens - 48) <= 2 for p in prompts), [p.tokens for p in prompts]
    load = LLMLoad(output_tokens=8, concurrency=(1, 4), requests_per_user=2, min_requests=4)
    report = run_llm_perf(llm_server.grpc_url, "smollm2", prompts, load, out_dir=tmp_path,
                          metrics_url=llm_server.metrics_url)  # fmt: skip
    assert [p.concurrency for p in report.points] == [1, 4]
    for point in report.points:
        c, s = point.client, point.server
        assert c.requests == load.requests(point.concurrency) and c.unanswered == 0
        assert c.tokens_per_request_min == c.tokens_per_request_max == 8  # ignore_eos: all asked for
        assert 0 < c.ttft_ms_p50 <= c.latency_ms_p50 and c.ttft_ms_p99 <= c.latency_ms_p99
        assert 0 < c.itl_ms_p50 <= c.itl_ms_p99 and c.output_tokens_per_s > 0
        assert s is not None and s.refused == 0 and s.failures == 0 and s.requests == c.requests
        assert s.ttft_ms_mean > 0 and s.tpot_ms_mean > 0
    export = tmp_path / "raw" / "smollm2_llm_concurrency_4.profile.json"
    for request in profile_export.load(export)[0].requests:
        # A response carries what piled up while the stream's last one was being sent: under load the
        # first may carry several tokens (docs/llm_serving.md), so only the counts must add up.
        assert request.ttft_s <= request.latency_s and sum(request.tokens) == 8
        assert len(request.response_ns) == len(request.tokens) >= 2 and min(request.tokens) >= 1
    assert all(Path(f).is_file() for f in report.files.values())


def test_an_openai_servers_chunks_count_tokens_from_its_usage() -> None:
    """``fixtures/llm_profile_export_openai.json``: vLLM's own server, ``v1/completions``, 8 tokens;
    its last two chunks (usage only, ``[DONE]``) carry no token and are not arrivals."""
    (experiment,) = profile_export.load(FIXTURES / "llm_profile_export_openai.json")
    raw = json.loads((FIXTURES / "llm_profile_export_openai.json").read_text())["experiments"][0]["requests"]
    for request, entry in zip(experiment.requests, raw, strict=True):
        assert len(entry["response_timestamps"]) == 10
        assert request.tokens == (1,) * 8
        assert list(request.response_ns) == entry["response_timestamps"][:8]
    assert profile_export.sse_tokens(['data: {"choices": [{"text": " a"}]}\n\n', "data: [DONE]\n\n"]) == [
        1,
        0,
    ]


@pytest.mark.integration
def test_tritonforge_perf_on_an_llm_gates_against_a_baseline(llm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``tritonforge perf smollm2``: told an LLM from the server's config, prompts from
    ``calibration/smollm2/perf.json`` beside the spec, then ``--baseline`` passes on itself and fails
    against a baseline 10x faster."""
    from builder.cli import main

    common = ["perf", "smollm2", "--url", llm_server.grpc_url, "--protocol", "grpc",
              "--metrics-url", llm_server.metrics_url, "--spec", str(ROOT / "models.yaml"),
              "--concurrency", "2", "--output-tokens", "4", "--requests-per-user", "2",
              "--cache", str(test_cache_dir())]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "a")]) == 0
    report = json.loads((tmp_path / "a" / "smollm2.json").read_text())
    assert report["kind"] == "llm" and report["points"][0]["client"]["tokens_per_request_max"] == 4
    assert report["settings"]["prompts"] == len(load_chats(ROOT / "calibration" / "smollm2" / "perf.json"))
    loose = ["--max-throughput-drop", "0.95", "--max-p99-rise", "20"]
    assert (
        main(
            [
                *common,
                "--out",
                str(tmp_path / "b"),
                "--baseline",
                str(tmp_path / "a" / "smollm2.json"),
                *loose,
            ]
        )
        == 0
    )
    report["points"][0]["client"]["output_tokens_per_s"] *= 100
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(report))
    assert main([*common, "--out", str(tmp_path / "c"), "--baseline", str(faster), *loose]) == 1


def test_the_llm_prompts_are_found_beside_the_spec(tmp_path: Path) -> None:
    from builder.cli.perf import llm_prompts_file

    assert llm_prompts_file(ROOT / "models.yaml", "smollm2") == ROOT / "calibration" / "smollm2" / "perf.json"
    assert llm_prompts_file(tmp_path / "models.yaml", "smollm2") is None
