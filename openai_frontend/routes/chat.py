"""``POST /v1/chat/completions``: the model renders the messages with its own chat template."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..protocol import parse_chat, parse_json
from .generate import answer

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    return await answer(request, parse_chat(parse_json(await request.body())), chat=True)
