"""bench.rerank: 64 passages per query from the MiniLM data, each row from each side's best round,
against its target, and a summary without vLLM's server that says why."""

from bench.rerank import PASSAGES_PER_QUERY, best, passages, requests, rows


def _run(qps: float) -> dict[str, object]:
    return {"queries": 16, "queries_per_s": qps, "p50_ms": 1000 / qps}


SIDES = {
    "sentence_transformers": {"in_process": [_run(2.0), _run(2.5)]},
    "tritonforge": {"c1": [_run(1.5), _run(1.8)], "c8": [_run(2.4), _run(2.2)]},
    "vllm": {"c1": [_run(2.0)], "c8": [_run(3.0)]},
}


def test_each_query_takes_64_passages_of_the_data_within_the_model() -> None:
    texts = passages()
    asks = requests(texts, 20)
    assert len(asks) == 20 and all(len(docs) == PASSAGES_PER_QUERY for _, docs in asks)
    assert len({q for q, _ in asks}) > 1 and all(len(t) <= 400 for t in texts)


def test_rows_take_each_sides_best_round_against_the_targets() -> None:
    assert best(SIDES["tritonforge"]["c8"])["queries_per_s"] == 2.4
    got = rows({"sides": SIDES})
    assert [r.measured.split(" (")[0] for r in got] == ["0.72x", "0.96x", "0.90x", "0.80x"]
    assert [r.met for r in got] == [None, True, False, False]  # c8 >= 0.8x in process; >= 1x vLLM
    alone = rows({"sides": {k: v for k, v in SIDES.items() if k != "vllm"}, "vllm_skipped": "not here"})
    assert alone[-1].measured == "skipped: not here" and alone[-1].met is None
