"""ASGI middleware before every route: the API key (constant-time), then the body size (413 before
reading it all)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .protocol import OpenAIError


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
