"""The engine's response streams, as the routes use them: each prompt's stream started, the first
responses awaited together, the rest merged as they come (tagged by prompt), all closed (which
cancels their requests) when the answer ends or the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Sequence
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from clients.errors import TritonClientError
from clients.generator import Piece

from .protocol import from_triton
from .responses import Tagged

T = TypeVar("T")
CLIENT_CLOSED = 499  # nginx's status for a request whose client went away; nobody reads it


async def close_all(streams: Sequence[AsyncGenerator[Piece, None]]) -> None:
    """Close each stream: one still open cancels its request on the server."""
    for stream in streams:
        await stream.aclose()


async def unless_gone(request: Request, answer: Coroutine[Any, Any, Response]) -> Response:
    """``answer``, or, when the client disconnects first, nothing: the answer is cancelled, which
    cancels its gRPC calls, and the model stops generating (vLLM's server does the same,
    ``with_cancellation``). A streamed answer needs none of this: Starlette ends it on a disconnect."""
    work = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not work.done():
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return Response(status_code=CLIENT_CLOSED)
    return work.result()


async def disconnect(request: Request) -> None:
    """Returns when the client has gone (the body was read already, so only a disconnect comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def together(steps: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
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


async def rest(pieces: AsyncIterator[Piece]) -> list[Piece]:
    return [p async for p in _mapped(pieces)]


async def first(pieces: AsyncGenerator[Piece, None]) -> Piece | None:
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


async def merged(
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
