"""The engine of a request's app, and the served model a request's ``model`` names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from fastapi import Request

from clients.errors import TritonClientError

from ..engine import Catalog, Embedder, Engine, Reranker, Route
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
    catalog = await _catalog(engine, name, lambda c: c.embedders)
    if name is None:
        return only(catalog.embedders, "embedding model")
    if name in catalog.embedders:
        return catalog.embedders[name]
    raise _elsewhere(catalog, name, "an embedding model")


async def reranker(engine: Engine, name: str | None) -> Reranker:
    catalog = await _catalog(engine, name, lambda c: c.rerankers)
    if name is None:
        return only(catalog.rerankers, "reranker")
    if name in catalog.rerankers:
        return catalog.rerankers[name]
    raise _elsewhere(catalog, name, "a reranker")


async def _catalog(
    engine: Engine, name: str | None, kind: Callable[[Catalog], Mapping[str, object]]
) -> Catalog:
    """The served models; a fresh list where the last has no model of the kind by that name (or,
    without a name, not exactly one)."""
    try:
        catalog = await engine.catalog()
        models = kind(catalog)
        if (name is None and len(models) != 1) or (name is not None and name not in models):
            catalog = await engine.catalog(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    return catalog


def _elsewhere(catalog: Catalog, name: str, kind: str) -> OpenAIError:
    """The 400 for a model served for other routes (vLLM's server answers another model's route as
    not served), else the 404 for a model not served."""
    routes = None
    if name in catalog.llms or any(name in llm.adapters for llm in catalog.llms.values()):
        routes = "/v1/completions and /v1/chat/completions"
    elif name in catalog.embedders:
        routes = "/v1/embeddings"
    elif name in catalog.rerankers:
        routes = "/v1/rerank and /v1/score"
    if routes is None:
        return unknown_model(name)
    return bad_request(f"model `{name}` is not {kind} (it answers {routes})", "model")


def only(models: Mapping[str, T], kind: str) -> T:
    if len(models) == 1:
        return next(iter(models.values()))
    if not models:
        raise OpenAIError(404, f"no {kind} is served here", param="model", code="model_not_found")
    raise bad_request(f"model is required: {len(models)} {kind}s are served ({', '.join(sorted(models))})",
                      "model")  # fmt: skip
