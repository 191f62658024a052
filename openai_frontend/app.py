"""The FastAPI application: ``create_app(settings, engine)``, one router per endpoint
(``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``, vLLM's
``/v1/rerank`` and ``/v1/score``) over the engine
it is given (``app.engine``, as Triton's own OpenAI frontend attaches its engine), behind the
guard (API key, body size)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from . import DEFAULT_MAX_BODY_BYTES
from .engine import Engine
from .guard import Guard
from .protocol import OpenAIError
from .routes import chat, completions, embeddings, models, rerank


@dataclass(frozen=True)
class Settings:
    api_key: str | None = None  # None: no key asked for
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


class EndpointApp(FastAPI):
    """The app with its engine attached (the routes read ``request.app.engine``)."""

    engine: Engine


def create_app(settings: Settings, engine: Engine) -> EndpointApp:
    """The endpoint over ``engine``; the app's shutdown closes it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.close()

    app = EndpointApp(title="tritonforge OpenAI-compatible endpoint", lifespan=lifespan, docs_url=None,
                      redoc_url=None, openapi_url=None)  # fmt: skip
    app.engine = engine
    app.add_exception_handler(OpenAIError, _error_response)  # type: ignore[arg-type]
    for route in (models, chat, completions, embeddings, rerank):
        app.include_router(route.router)
    app.add_middleware(Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    return app


async def _error_response(_: Request, exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)
