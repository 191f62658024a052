"""The FastAPI application: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
``/v1/embeddings``."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types import Model
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clients.errors import TritonClientError
from clients.generator import Piece

from . import DEFAULT_MAX_BODY_BYTES, logprobs
from .bridge import Route, TritonBridge
from .embedders import Embedder
from .embeddings import check_dimensions, parse_embedding, response
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
from .responses import Envelope, Tagged, Tally, choices, chunk, chunk_event, usage_chunk, whole

T = TypeVar("T")
CLIENT_CLOSED = 499  # nginx's status for a request whose client went away; nobody reads it


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
    app.add_api_route("/v1/embeddings", _embeddings, methods=["POST"])
    app.add_middleware(Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    return app


async def _error_response(_: Request, exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _bridge(request: Request) -> TritonBridge:
    bridge: TritonBridge = request.app.state.bridge
    return bridge


async def _list_models(request: Request) -> JSONResponse:
    try:
        catalog = await _bridge(request).catalog(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    data = []
    for name, llm in catalog.llms.items():
        data.append(Model(id=name, created=0, object="model", owned_by="tritonforge").model_dump())
        # Its LoRA adapters, as vLLM's own server lists them: their own ids, the base as parent.
        data += [_adapter_card(adapter, name) for adapter in llm.adapters]
    data += [Model(id=name, created=0, object="model", owned_by="tritonforge").model_dump()
             for name in catalog.embedders]  # fmt: skip
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
    route = await _route(bridge, call.model)
    llm = route.llm
    if chat and not llm.chat:
        raise bad_request(f"model `{llm.name}` takes no chat messages (no `messages` input): use "
                          "/v1/completions", "messages")  # fmt: skip
    with_priority = "priority" in llm.inputs
    streams = [
        bridge.pieces(llm.name, call.fields(with_priority, route.lora_name, i, not llm.limits_output))
        for i in range(len(call.prompts))
    ]
    env = Envelope.new(call.model or llm.name, chat)  # an adapter's answers carry its name, as vLLM's do
    if not call.stream:
        try:
            return await _unless_gone(request, _whole(env, call, streams))
        finally:
            await _close(streams)
    # The first responses decide the status: a refusal or a bad request is an error, not a stream.
    try:
        firsts = await _all([_first(s) for s in streams])
    except BaseException:
        await _close(streams)
        raise
    return StreamingResponse(_events(env, call, _merged(firsts, streams)), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})  # fmt: skip


async def _whole(env: Envelope, call: Call, streams: Sequence[AsyncGenerator[Piece, None]]) -> Response:
    firsts = await _all([_first(s) for s in streams])
    rests = await _all([_rest(s) for s in streams])
    tagged = [(i, p) for i, (f, r) in enumerate(zip(firsts, rests, strict=True)) for p in (f, *r) if p]
    return _json(whole(env, tagged, call.n, _echoed(call), call.top_logprobs))


async def _close(streams: Sequence[AsyncGenerator[Piece, None]]) -> None:
    """Close each stream: one still open cancels its request on the server."""
    for stream in streams:
        await stream.aclose()


async def _unless_gone(request: Request, answer: Coroutine[Any, Any, Response]) -> Response:
    """``answer``, or, when the client disconnects first, nothing: the answer is cancelled, which
    cancels its gRPC calls, and the model stops generating (vLLM's server does the same,
    ``with_cancellation``). A streamed answer needs none of this: Starlette ends it on a disconnect."""
    work = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not work.done():
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return Response(status_code=CLIENT_CLOSED)
    return work.result()


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (the body was read already, so only a disconnect comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _echoed(call: Call) -> tuple[str, ...]:
    return tuple(str(p) for p in call.prompts) if call.echo else ()


async def _route(bridge: TritonBridge, name: str | None) -> Route:
    """Where ``name`` goes; None: the one LLM served (as vLLM, which serves one)."""
    try:
        if name is None:
            models = await bridge.models()
            return Route(_only(models if len(models) == 1 else await bridge.models(fresh=True), "LLM"))
        route = await bridge.route(name)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    if route is None:
        raise unknown_model(name)
    return route


def _only(models: Mapping[str, T], kind: str) -> T:
    if len(models) == 1:
        return next(iter(models.values()))
    if not models:
        raise OpenAIError(404, f"no {kind} is served here", param="model", code="model_not_found")
    raise bad_request(f"model is required: {len(models)} {kind}s are served ({', '.join(sorted(models))})",
                      "model")  # fmt: skip


async def _all(steps: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Each step's result, run together; on a failure the others are cancelled first."""
    if len(steps) == 1:
        return [await steps[0]]
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _rest(pieces: AsyncIterator[Piece]) -> list[Piece]:
    return [p async for p in _mapped(pieces)]


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


async def _events(env: Envelope, call: Call, source: AsyncGenerator[Tagged, None]) -> AsyncIterator[str]:
    tally = Tally(call.n)
    started: set[int] = set()  # choices that had a chunk
    finished: set[int] = set()  # choices whose finish reason went out (n > 1 repeats it)
    echo = _echoed(call)
    offsets: dict[int, int] = {}  # completions' logprobs: each choice's text so far
    frame = env.frame()
    try:
        async for prompt, piece in source:
            tally.add(piece, prompt)
            for index, part in choices(piece, prompt * call.n):
                reason = None if index in finished else part.finish_reason
                text = echo[prompt] + part.text if echo and index not in started else part.text
                found = logprobs.steps(part.logprobs)
                if text or reason or found or index not in started:
                    first = index not in started
                    if call.top_logprobs is None:  # one per streamed piece: written, not modelled
                        yield chunk_event(frame, env.chat, text, reason, first, index)
                    else:
                        scores = _scores(call, found, offsets.get(index, 0), env.chat)
                        offsets[index] = offsets.get(index, 0) + logprobs.text_length(found)
                        yield _sse(chunk(env, text, reason, first=first, index=index, scores=scores))
                    started.add(index)
                if reason:
                    finished.add(index)
        if call.include_usage:
            yield _sse(usage_chunk(env, tally.usage()))
    except TritonClientError as exc:  # after the status line: the error goes in the stream, as vLLM's
        yield f"data: {json.dumps(from_triton(exc).body())}\n\n"
    finally:
        await source.aclose()  # cancels the requests if the client left
    yield "data: [DONE]\n\n"


def _scores(
    call: Call, found: list[logprobs.Step], offset: int, chat: bool
) -> logprobs.ChunkLogprobs | logprobs.Logprobs | None:
    """A chunk's logprobs (its tokens'), when the request asked for them."""
    if call.top_logprobs is None:
        return None
    if chat:
        return logprobs.chat_chunk(found, call.top_logprobs)
    return logprobs.completion(found, call.top_logprobs, offset)


async def _merged(
    firsts: Sequence[Piece | None], streams: Sequence[AsyncGenerator[Piece, None]]
) -> AsyncGenerator[Tagged, None]:
    """Each prompt's first piece, then the rest of every stream as they come, tagged by prompt."""
    inner = _interleaved(streams) if len(streams) > 1 else None
    try:
        for i, first in enumerate(firsts):
            if first is not None:
                yield i, first
        if inner is None:
            async for piece in streams[0]:
                yield 0, piece
        else:
            async for tagged in inner:
                yield tagged
    finally:
        if inner is not None:
            await inner.aclose()  # its pumps stop before their streams are closed
        for stream in streams:
            await stream.aclose()


async def _interleaved(streams: Sequence[AsyncIterator[Piece]]) -> AsyncGenerator[Tagged, None]:
    queue: asyncio.Queue[tuple[int, Piece | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[Piece]) -> None:
        try:
            async for piece in stream:
                await queue.put((index, piece))
            await queue.put((index, None))
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put((index, exc))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            index, item = await queue.get()
            if isinstance(item, Exception):
                raise item
            if item is None:
                left -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _embeddings(request: Request) -> Response:
    call = parse_embedding(parse_json(await request.body()))
    bridge = _bridge(request)
    model = await _embedder(bridge, call.model)
    check_dimensions(call, model.name, model.dims)
    try:
        vectors, tokens = await bridge.embed(model, call.texts)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    return JSONResponse(response(call.model or model.name, vectors, call.base64, tokens))


async def _embedder(bridge: TritonBridge, name: str | None) -> Embedder:
    try:
        catalog = await bridge.catalog()
        if (name is None and len(catalog.embedders) != 1) or (
            name is not None and name not in catalog.embedders
        ):
            catalog = await bridge.catalog(fresh=True)
    except TritonClientError as exc:
        raise from_triton(exc) from None
    if name is None:
        return _only(catalog.embedders, "embedding model")
    if name in catalog.embedders:
        return catalog.embedders[name]
    if name in catalog.llms or any(name in llm.adapters for llm in catalog.llms.values()):
        raise bad_request(f"model `{name}` is not an embedding model (it answers /v1/completions and "
                          "/v1/chat/completions)", "model")  # fmt: skip
    raise unknown_model(name)


def _sse(model: BaseModel) -> str:
    return f"data: {model.model_dump_json(exclude_unset=True)}\n\n"


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(exclude_unset=True), media_type="application/json")


class Guard:
    """ASGI middleware: the API key (constant-time), then the body size (413 before reading it all)."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.key is not None and not hmac.compare_digest(
            _bearer(headers.get(b"authorization", b"")), self.key
        ):
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


def _bearer(header: bytes) -> bytes:
    """The credentials of an ``Authorization: Bearer ...`` header (the scheme is case-insensitive,
    RFC 7235); empty for any other header."""
    scheme, _, token = header.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


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
