"""``POST /v1/completions``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..protocol import parse_completion, parse_json
from .generate import answer

router = APIRouter()


@router.post("/v1/completions")
async def completion(request: Request) -> Response:
    return await answer(request, parse_completion(parse_json(await request.body())), chat=False)
