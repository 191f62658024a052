"""Which served models answer /v1/rerank and /v1/score, read from their Triton configs (no server)."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from openai_frontend.embedders import embedder
from openai_frontend.engine import Reranker
from openai_frontend.rerankers import max_length, reranker
from tests.openai_frontend.test_embedders import FP32, INT64, STRING, config

PAIR = [("TEXT", STRING, [1]), ("TEXT_PAIR", STRING, [1])]
TOKENIZE = ("rr_preprocess", {"TEXT": "TEXT", "TEXT_PAIR": "TEXT_PAIR"}, {"input_ids": "ids"})
SCORE = ("rr", {"input_ids": "ids"}, {"SCORE": "SCORE"})


def test_a_text_ranking_pipeline_and_its_tokenizer_step() -> None:
    outputs = [("SCORE", FP32, [1]), ("NUM_TOKENS", INT64, [1])]
    found = reranker(config("rr_pipeline", PAIR, outputs, batch=8, steps=[TOKENIZE, SCORE]))
    assert found == Reranker(
        "rr_pipeline", "TEXT", "TEXT_PAIR", "SCORE", 8, (1,), "NUM_TOKENS", "rr_preprocess"
    )
    assert embedder(config("rr_pipeline", PAIR, outputs, steps=[TOKENIZE, SCORE])) is None


def test_an_unbatched_scorer_without_token_counts() -> None:
    found = reranker(config("py", [("Q", STRING, [-1]), ("D", STRING, [-1])], [("S", FP32, [-1])], batch=0))
    assert found is not None and (found.query_input, found.shape_tail, found.tokens_output) == ("Q", (), None)


def test_models_that_are_no_rerankers() -> None:
    score = [("SCORE", FP32, [1])]
    assert reranker(config("one", PAIR[:1], score)) is None  # one text
    assert reranker(config("ids", [("a", INT64, [-1]), ("b", INT64, [-1])], score)) is None
    assert reranker(config("vec", PAIR, [("E", FP32, [8])])) is None  # a vector per item
    assert reranker(config("two", PAIR, [*score, ("B", FP32, [1])])) is None
    assert reranker(config("text", PAIR, [*score, ("L", STRING, [1])])) is None
    decoupled: Any = config("llm", PAIR, score)
    decoupled.model_transaction_policy.decoupled = True
    assert reranker(decoupled) is None


def test_the_tokenizer_steps_max_length() -> None:
    step = mc.ModelConfig(name="rr_preprocess")
    assert max_length(step) is None
    step.parameters["max_length"].string_value = "512"
    assert max_length(step) == 512
