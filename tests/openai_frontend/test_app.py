"""The endpoint's guard and its errors before any model answers (no LLM needed: the Triton
address has nothing listening, so what reaches Triton is refused as unavailable), then its
answers over a test engine: several prompts, echo, a request without ``model``, embeddings, vLLM's
rerank and score routes."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from builder.server import find_free_port
from clients.generator import Completion, Piece
from clients.vllm_engine_contract import TO_CONTEXT_END
from openai_frontend.app import Settings, create_app
from openai_frontend.engine import LLM, Catalog, Embedder, Reranker, Route
from openai_frontend.triton import TritonEngine

KEY = "k3y"
LIMIT = 1024


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(api_key=KEY, max_body_bytes=LIMIT)
    app = create_app(settings, TritonEngine(f"127.0.0.1:{find_free_port()}"))
    with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def _error(reply: object) -> dict[str, object]:
    body = reply.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Bearer {KEY}x", KEY])
def test_without_the_key_every_path_is_401(client: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {"Authorization": ""}
    reply = client.get("/v1/models", headers=headers)
    assert reply.status_code == 401 and _error(reply)["code"] == "invalid_api_key"
    assert reply.headers["www-authenticate"] == "Bearer"


def test_a_body_over_the_limit_is_413_declared_or_streamed(client: TestClient) -> None:
    big = b"{" + b" " * LIMIT + b"}"
    reply = client.post("/v1/completions", content=big)
    assert reply.status_code == 413 and _error(reply)["code"] == "request_too_large"
    chunked = client.post("/v1/completions", content=iter([big[:600], big[600:]]))  # no Content-Length
    assert chunked.status_code == 413


def test_bad_json_is_400_before_triton_is_asked(client: TestClient) -> None:
    reply = client.post("/v1/chat/completions", content=b"{not json")
    assert reply.status_code == 400 and _error(reply)["type"] == "invalid_request_error"
    reply = client.post("/v1/chat/completions", json={"model": "m", "messages": [], "n": 3})
    assert reply.status_code == 400


def test_triton_unreachable_is_503(client: TestClient) -> None:
    reply = client.get("/v1/models")
    assert reply.status_code == 503 and _error(reply)["type"] == "server_error"
    reply = client.post("/v1/completions", json={"model": "m", "prompt": "p"})
    assert reply.status_code == 503


RERANKER = Reranker("rr", "TEXT", "TEXT_PAIR", "SCORE", 2, (1,), "NUM_TOKENS", "rr_preprocess", 16)


class FakeEngine:
    """One LLM (``llm``: each prompt's first letter upper-cased, then "!"), one embedder and one
    reranker (``rr``: a document's score is its length / 10; a pair's tokens its two lengths + 3)."""

    def __init__(self) -> None:
        chat = frozenset({"text_input", "messages", "sampling_parameters"})
        embedders = {"emb": Embedder("emb", "TEXT", "E", 3, 2, (1,))}
        self._catalog = Catalog({"llm": LLM("llm", chat)}, embedders, {"rr": RERANKER})
        self.sent: list[Mapping[str, Any]] = []  # each request's fields

    async def catalog(self, fresh: bool = False) -> Catalog:
        return self._catalog

    async def route(self, name: str) -> Route | None:
        llm = self._catalog.llms.get(name)
        return None if llm is None else Route(llm)

    async def pieces(self, model: str, fields: Mapping[str, Any]) -> AsyncGenerator[Piece, None]:
        self.sent.append(fields)
        prompt = fields.get("text_input") or json.loads(fields["messages"])[-1]["content"]
        n = json.loads(fields["sampling_parameters"]).get("n", 1)
        for text, reason in ((prompt[:1].upper(), None), ("!", "stop")):
            await asyncio.sleep(0)
            scores = _logprobs(text) if fields.get("return_logprobs") else None
            others = tuple(Completion(text, reason, 1, scores) for _ in range(n - 1))
            yield Piece(text, reason, len(prompt), 1, others, scores)

    async def embed(self, model: Embedder, texts: Sequence[str]) -> tuple[np.ndarray[Any, Any], list[int]]:
        return np.array([[len(t), 0.5, -1] for t in texts], dtype=np.float32), [len(t) + 2 for t in texts]

    async def rerank(
        self, model: Reranker, pairs: Sequence[tuple[str, str]]
    ) -> tuple[np.ndarray[Any, Any], list[int]]:
        self.sent.append({"pairs": list(pairs)})
        scores = np.array([len(d) / 10 for _, d in pairs], dtype=np.float32)
        return scores, [len(q) + len(d) + 3 for q, d in pairs]

    async def close(self) -> None:
        pass


def _logprobs(text: str) -> str:
    """The model's JSON for one token ``text``: itself (-0.25), then one other candidate."""
    chosen = {"logprob": -0.25, "rank": 1, "decoded_token": text}
    return json.dumps([{"1": chosen, "2": {"logprob": -2.0, "rank": 2, "decoded_token": "?"}}])


@pytest.fixture(scope="module")
def fake() -> Iterator[TestClient]:
    app = create_app(Settings(api_key=KEY), FakeEngine())
    with TestClient(app, headers={"Authorization": f"bearer {KEY}"}) as c:  # the scheme in lower case
        yield c


ASK = {"prompt": ["ab", "c"], "n": 2, "echo": True}  # no model: the one LLM served


def test_several_prompts_each_n_choices_echoed(fake: TestClient) -> None:
    reply = fake.post("/v1/completions", json=ASK)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["model"] == "llm"
    assert [(c["index"], c["text"]) for c in body["choices"]] == [
        (0, "abA!"),
        (1, "abA!"),
        (2, "cC!"),
        (3, "cC!"),
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}


def test_several_prompts_streamed(fake: TestClient) -> None:
    reply = fake.post(
        "/v1/completions", json={**ASK, "stream": True, "stream_options": {"include_usage": True}}
    )
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    texts: dict[int, str] = {}
    reasons: dict[int, list[str]] = {}
    for event in events[:-1]:
        (choice,) = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"]:
            reasons.setdefault(choice["index"], []).append(choice["finish_reason"])
    assert texts == {0: "abA!", 1: "abA!", 2: "cC!", 3: "cC!"}
    assert reasons == {i: ["stop"] for i in range(4)}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["prompt_tokens"] == 3
    assert reply.text.endswith("data: [DONE]\n\n")


def test_embeddings_and_the_models_list(fake: TestClient) -> None:
    assert [m["id"] for m in fake.get("/v1/models").json()["data"]] == ["llm", "emb", "rr"]
    body = fake.post("/v1/embeddings", json={"input": ["abc", "d"], "encoding_format": "base64"}).json()
    assert body["model"] == "emb" and body["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    first = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    assert first.tolist() == [3.0, 0.5, -1.0]
    floats = fake.post("/v1/embeddings", json={"model": "emb", "input": "d"}).json()
    assert floats["data"] == [{"object": "embedding", "index": 0, "embedding": [1.0, 0.5, -1.0]}]
    wrong = fake.post("/v1/embeddings", json={"model": "llm", "input": "d"})
    assert wrong.status_code == 400 and _error(wrong)["param"] == "model"
    assert fake.post("/v1/embeddings", json={"model": "nope", "input": "d"}).status_code == 404
    sized = fake.post("/v1/embeddings", json={"input": "d", "dimensions": 2})
    assert sized.status_code == 400 and _error(sized)["param"] == "dimensions"


def _sent(fake: TestClient) -> Mapping[str, Any]:
    engine: FakeEngine = fake.app.engine  # type: ignore[attr-defined]
    return engine.sent[-1]


def test_chat_logprobs_whole_and_streamed(fake: TestClient) -> None:
    ask = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 1}
    body = fake.post("/v1/chat/completions", json=ask).json()
    assert _sent(fake)["return_logprobs"] is True
    assert json.loads(_sent(fake)["sampling_parameters"])["logprobs"] == 1
    content = body["choices"][0]["logprobs"]["content"]
    assert "".join(t["token"] for t in content) == body["choices"][0]["message"]["content"] == "H!"
    assert content[0] == {"token": "H", "logprob": -0.25, "bytes": [72],
                          "top_logprobs": [{"token": "H", "logprob": -0.25, "bytes": [72]}]}  # fmt: skip
    reply = fake.post("/v1/chat/completions", json={**ask, "stream": True})
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    tokens = [t["token"] for e in events for t in e["choices"][0]["logprobs"]["content"]]
    assert tokens == ["H", "!"]
    plain = fake.post("/v1/chat/completions", json={"messages": ask["messages"]}).json()["choices"][0]
    assert plain["logprobs"] is None and "return_logprobs" not in _sent(fake)


def test_completion_logprobs_count_text_offsets_across_chunks(fake: TestClient) -> None:
    ask = {"prompt": "ab", "logprobs": 1, "max_tokens": 4}
    whole = fake.post("/v1/completions", json=ask).json()["choices"][0]["logprobs"]
    assert whole == {"tokens": ["A", "!"], "token_logprobs": [-0.25, -0.25], "text_offset": [0, 1],
                     "top_logprobs": [{"A": -0.25, "?": -2.0}, {"!": -0.25, "?": -2.0}]}  # fmt: skip
    reply = fake.post("/v1/completions", json={**ask, "stream": True})
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    assert [e["choices"][0]["logprobs"]["text_offset"] for e in events] == [[0], [1]]


def test_without_max_tokens_the_model_is_asked_to_the_context_end(fake: TestClient) -> None:
    fake.post("/v1/completions", json={"prompt": "ab"})
    assert json.loads(_sent(fake)["sampling_parameters"]) == {"max_tokens": TO_CONTEXT_END}
    fake.post("/v1/completions", json={"prompt": "ab", "max_tokens": 3})
    assert json.loads(_sent(fake)["sampling_parameters"]) == {"max_tokens": 3}


DOCS = ["ab", {"text": "abcd"}, "a"]  # a string, Cohere's and Jina's object form, a string


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_answers_vllms_body_best_first(fake: TestClient, path: str) -> None:
    body = fake.post(path, json={"model": "rr", "query": "q", "documents": DOCS}).json()
    assert list(body) == ["id", "model", "usage", "results"] and body["id"].startswith("score-")
    assert body["model"] == "rr" and body["usage"] == {"prompt_tokens": 19, "total_tokens": 19}
    assert body["results"] == [
        {"index": i, "document": {"text": text, "multi_modal": None}, "relevance_score": pytest.approx(score)}
        for i, text, score in ((1, "abcd", 0.4), (0, "ab", 0.2), (2, "a", 0.1))
    ]
    assert _sent(fake) == {"pairs": [("q", "ab"), ("q", "abcd"), ("q", "a")]}


def test_rerank_top_n_return_documents_and_request_id(fake: TestClient) -> None:
    ask = {"query": "q", "documents": "abc", "top_n": 0, "request_id": "r1"}  # one document as a string
    body = fake.post("/rerank", json=ask).json()
    assert body["id"] == "score-r1" and [r["index"] for r in body["results"]] == [0]
    ask = {"query": "q", "documents": DOCS, "top_n": 2, "return_documents": False}
    assert fake.post("/rerank", json=ask).json()["results"] == [
        {"index": 1, "relevance_score": pytest.approx(0.4)},
        {"index": 0, "relevance_score": pytest.approx(0.2)},
    ]


@pytest.mark.parametrize("path", ["/v1/score", "/score"])
def test_score_takes_each_of_vllms_forms_one_to_n_and_n_to_n(fake: TestClient, path: str) -> None:
    body = fake.post(path, json={"model": "rr", "queries": "q", "documents": ["ab", "a"]}).json()
    assert list(body) == ["id", "object", "created", "model", "data", "usage"] and body["object"] == "list"
    assert body["data"] == [{"index": 0, "object": "score", "score": pytest.approx(0.2)},
                            {"index": 1, "object": "score", "score": pytest.approx(0.1)}]  # fmt: skip
    assert body["usage"] == {"prompt_tokens": 11, "total_tokens": 11, "completion_tokens": 0,
                             "prompt_tokens_details": None, "completion_tokens_details": None}  # fmt: skip
    for first, second in (("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")):
        fake.post(path, json={first: ["x", "yy"], second: ["ab", "a"]})
        assert _sent(fake) == {"pairs": [("x", "ab"), ("yy", "a")]}


@pytest.mark.parametrize(
    ("path", "ask", "status", "param"),
    [
        ("/v1/rerank", {"query": "q", "documents": []}, 400, "documents"),
        ("/v1/rerank", {"documents": ["a"]}, 400, "query"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": -1}, 400, "top_n"),
        ("/v1/rerank", {"query": "q", "documents": [{"content": [{"type": "text", "text": "a"}]}]}, 400,
         "documents"),
        ("/v1/rerank", {"model": "llm", "query": "q", "documents": ["a"]}, 400, "model"),
        ("/v1/rerank", {"model": "emb", "query": "q", "documents": ["a"]}, 400, "model"),
        ("/v1/rerank", {"model": "nope", "query": "q", "documents": ["a"]}, 404, "model"),
        ("/v1/rerank", {"query": "q", "documents": ["a" * 13]}, 400, "input_tokens"),  # 1 + 13 + 3 > 16
        ("/v1/rerank", {"query": "q", "documents": ["a"], "use_activation": False}, 400, "use_activation"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "truncate_prompt_tokens": 8}, 400,
         "truncate_prompt_tokens"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "truncate_prompt_tokens": 99}, 400,
         "truncate_prompt_tokens"),
        ("/v1/score", {"queries": ["a", "b"], "documents": ["a", "b", "c"]}, 400, "documents"),
        ("/v1/score", {"queries": [], "documents": ["a"]}, 400, "queries"),
        ("/v1/score", {"query": "a", "documents": ["a"]}, 400, "queries"),
        ("/v1/embeddings", {"model": "rr", "input": "a"}, 400, "model"),
    ],
)  # fmt: skip
def test_bad_rerank_and_score_requests_get_vllms_status_naming_the_field(
    fake: TestClient, path: str, ask: dict[str, Any], status: int, param: str
) -> None:
    reply = fake.post(path, json=ask)
    assert reply.status_code == status and _error(reply)["param"] == param, reply.json()


def test_a_pair_over_the_length_is_cut_when_asked_and_counted_as_taken(fake: TestClient) -> None:
    ask = {"query": "q", "documents": ["a" * 13, "a"], "truncate_prompt_tokens": -1}
    assert fake.post("/v1/rerank", json=ask).json()["usage"]["prompt_tokens"] == 16 + 5
    same = {**ask, "truncate_prompt_tokens": 16}  # the model's own length
    assert fake.post("/v1/rerank", json=same).status_code == 200


def test_rerank_asks_for_the_key_and_is_unavailable_without_triton(client: TestClient) -> None:
    reply = client.post("/v1/rerank", json={"query": "q", "documents": ["a"]}, headers={"Authorization": ""})
    assert reply.status_code == 401 and _error(reply)["code"] == "invalid_api_key"
    assert client.post("/v1/score", json={"queries": "q", "documents": ["a"]}).status_code == 503
