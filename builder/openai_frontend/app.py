"""The FastAPI application: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``."""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types import Model
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clients.errors import TritonClientError
from clients.generator import Piece

from . import DEFAULT_MAX_BODY_BYTES
from .bridge import TritonBridge
from .protocol import (
    Call,
    OpenAIError,
    bad_request,
    from_triton,
    parse_chat,
    parse_completion,
    parse_json,
    unknown_model,
)
from .responses import Envelope, Tally, choices, chunk, usage_chunk, whole


@dataclass(frozen=True)
class Settings:
    triton_grpc: str  # host:port of tritonserver's gRPC endpoint
    api_key: str | None = None  # None: no key asked for
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.bridge = TritonBridge(settings.triton_grpc)  # its channel belongs to this loop
        yield
        await app.state.bridge.close()

    app = FastAPI(title="tritonforge OpenAI-compatible endpoint", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)  # fmt: skip
    app.add_exception_handler(OpenAIError, _error_response)  # type: ignore[arg-type]
    app.add_api_route("/v1/models", _list_models, methods=["GET"])
    app.add_api_route("/v1/chat/completions", _chat, methods=["POST"])
    app.add_api_route("/v1/completions", _completion, methods=["POST"])
    app.add_middleware(Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    return app


async def _error_response(_: Request, exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _bridge(request: Request) -> TritonBridge:
    bridge: TritonBridge = request.app.state.bridge
    return bridge


async def _list_models(request: Request) -> JSONResponse:
    try:
        models = await _bridge(request).models(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    data = []
    for name, llm in models.items():
        data.append(Model(id=name, created=0, object="model", owned_by="tritonforge").model_dump())
        # Its LoRA adapters, as vLLM's own server lists them: their own ids, the base as parent.
        data += [_adapter_card(adapter, name) for adapter in llm.adapters]
    return JSONResponse({"object": "list", "data": data})


def _adapter_card(adapter: str, parent: str) -> dict[str, Any]:
    card = Model(id=adapter, created=0, object="model", owned_by="tritonforge", parent=parent)
    return card.model_dump()


async def _chat(request: Request) -> Response:
    return await _answer(request, parse_chat(parse_json(await request.body())), chat=True)


async def _completion(request: Request) -> Response:
    return await _answer(request, parse_completion(parse_json(await request.body())), chat=False)


async def _answer(request: Request, call: Call, chat: bool) -> Response:
    bridge = _bridge(request)
    try:
        route = await bridge.route(call.model)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    if route is None:
        raise unknown_model(call.model)
    llm = route.llm
    if chat and not llm.chat:
        raise bad_request(f"model `{llm.name}` takes no chat messages (no `messages` input): use "
                          "/v1/completions", "messages")  # fmt: skip
    fields = call.fields(with_priority="priority" in llm.inputs, lora_name=route.lora_name)
    pieces = bridge.pieces(llm.name, fields)
    env = Envelope.new(call.model, chat)  # an adapter's answers carry its name, as vLLM's do
    # The first response decides the status: a refusal or a bad request is an error, not a stream.
    try:
        first = await _first(pieces)
        if not call.stream:
            rest = [p async for p in _mapped(pieces)]
            return _json(whole(env, [p for p in (first, *rest) if p is not None]))
    except BaseException:
        await pieces.aclose()
        raise
    return StreamingResponse(_events(env, call, first, pieces), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})  # fmt: skip


async def _first(pieces: AsyncGenerator[Piece, None]) -> Piece | None:
    try:
        return await anext(pieces)
    except StopAsyncIteration:
        return None
    except TritonClientError as exc:
        raise from_triton(exc) from None


async def _mapped(pieces: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    try:
        async for piece in pieces:
            yield piece
    except TritonClientError as exc:
        raise from_triton(exc) from None


async def _events(
    env: Envelope, call: Call, first: Piece | None, pieces: AsyncGenerator[Piece, None]
) -> AsyncIterator[str]:
    tally = Tally()
    started: set[int] = set()  # choices that had a chunk
    finished: set[int] = set()  # choices whose finish reason went out (n > 1 repeats it)
    try:
        source = _chain(first, pieces)
        async for piece in source:
            tally.add(piece)
            for index, part in choices(piece):
                reason = None if index in finished else part.finish_reason
                if part.text or reason or index not in started:
                    yield _sse(chunk(env, part.text, reason, first=index not in started, index=index))
                    started.add(index)
                if reason:
                    finished.add(index)
        if call.include_usage:
            yield _sse(usage_chunk(env, tally.usage()))
    except TritonClientError as exc:  # after the status line: the error goes in the stream, as vLLM's
        yield f"data: {json.dumps(from_triton(exc).body())}\n\n"
    finally:
        await pieces.aclose()  # cancels the request if the client left
    yield "data: [DONE]\n\n"


async def _chain(first: Piece | None, rest: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    if first is not None:
        yield first
    async for piece in rest:
        yield piece


def _sse(model: BaseModel) -> str:
    return f"data: {model.model_dump_json(exclude_unset=True)}\n\n"


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(exclude_unset=True), media_type="application/json")


class Guard:
    """ASGI middleware: the API key (constant-time), then the body size (413 before reading it all)."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes
        self.key = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.key is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self.key):
            error = OpenAIError(401, "Incorrect or missing API key (send it as `Authorization: Bearer KEY`).",
                                code="invalid_api_key")  # fmt: skip
            await _send(scope, send, error)
            return
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_body_bytes:
            await _send(scope, send, self._too_large(declared.decode("latin-1")))
            return
        body = await self._read(receive)
        if body is None:
            await _send(scope, send, self._too_large("more than that"))
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            part = message.get("body", b"")
            total += len(part)
            if total > self.max_body_bytes:
                return None
            chunks.append(part)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self, size: str) -> OpenAIError:
        return OpenAIError(413, f"the request body ({size} bytes) exceeds the limit of {self.max_body_bytes} "
                                "bytes (--openai-max-body-bytes)", code="request_too_large")  # fmt: skip


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # a streaming response waits here for the client to leave
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _send(scope: Scope, send: Send, error: OpenAIError) -> None:
    async def closed() -> Message:
        return {"type": "http.disconnect"}

    headers: dict[str, Any] = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
    await JSONResponse(error.body(), status_code=error.status, headers=headers)(scope, closed, send)
