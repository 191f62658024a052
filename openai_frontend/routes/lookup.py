"""The engine of a request's app, and the served model a request's ``model`` names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from fastapi import Request

from clients.errors import TritonClientError

from ..engine import Embedder, Engine, Route
from ..protocol import OpenAIError, bad_request, from_triton, unknown_model

T = TypeVar("T")


def engine_of(request: Request) -> Engine:
    """The engine ``create_app`` attached to the app (``app.engine``)."""
    engine: Engine = request.app.engine
    return engine


async def llm_route(engine: Engine, name: str | None) -> Route:
    """Where ``name`` goes; None: the one LLM served (as vLLM, which serves one)."""
    try:
        if name is None:
            models = (await engine.catalog()).llms
            if len(models) != 1:
                models = (await engine.catalog(fresh=True)).llms
            return Route(only(models, "LLM"))
        route = await engine.route(name)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    if route is None:
        raise unknown_model(name)
    return route


async def embedder(engine: Engine, name: str | None) -> Embedder:
    try:
        catalog = await engine.catalog()
        if (name is None and len(catalog.embedders) != 1) or (
            name is not None and name not in catalog.embedders
        ):
            catalog = await engine.catalog(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    if name is None:
        return only(catalog.embedders, "embedding model")
    if name in catalog.embedders:
        return catalog.embedders[name]
    if name in catalog.llms or any(name in llm.adapters for llm in catalog.llms.values()):
        raise bad_request(f"model `{name}` is not an embedding model (it answers /v1/completions and "
                          "/v1/chat/completions)", "model")  # fmt: skip
    raise unknown_model(name)


def only(models: Mapping[str, T], kind: str) -> T:
    if len(models) == 1:
        return next(iter(models.values()))
    if not models:
        raise OpenAIError(404, f"no {kind} is served here", param="model", code="model_not_found")
    raise bad_request(f"model is required: {len(models)} {kind}s are served ({', '.join(sorted(models))})",
                      "model")  # fmt: skip
