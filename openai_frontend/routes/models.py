"""``GET /v1/models``: the LLMs, their LoRA adapters, the embedding models and the rerankers served."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from openai.types import Model

from clients.errors import TritonClientError

from ..protocol import from_triton
from .lookup import engine_of

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> JSONResponse:
    try:
        catalog = await engine_of(request).catalog(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    data = []
    for name, llm in catalog.llms.items():
        data.append(Model(id=name, created=0, object="model", owned_by="tritonforge").model_dump())
        # Its LoRA adapters, as vLLM's own server lists them: their own ids, the base as parent.
        data += [_adapter_card(adapter, name) for adapter in llm.adapters]
    data += [Model(id=name, created=0, object="model", owned_by="tritonforge").model_dump()
             for name in [*catalog.embedders, *catalog.rerankers]]  # fmt: skip
    return JSONResponse({"object": "list", "data": data})


def _adapter_card(adapter: str, parent: str) -> dict[str, Any]:
    card = Model(id=adapter, created=0, object="model", owned_by="tritonforge", parent=parent)
    return card.model_dump()
