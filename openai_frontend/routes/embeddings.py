"""``POST /v1/embeddings``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from clients.errors import TritonClientError

from ..embeddings import check_dimensions, parse_embedding, response
from ..protocol import from_triton, parse_json
from .lookup import embedder, engine_of

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    call = parse_embedding(parse_json(await request.body()))
    engine = engine_of(request)
    model = await embedder(engine, call.model)
    check_dimensions(call, model.name, model.dims)
    try:
        vectors, tokens = await engine.embed(model, call.texts)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    return JSONResponse(response(call.model or model.name, vectors, call.base64, tokens))
