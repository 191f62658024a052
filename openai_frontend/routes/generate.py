"""What completions and chat share: one engine request per prompt, answered whole or streamed
as server-sent events (a choice's chunks as they come, its finish reason once, usage last when
asked for)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from clients.errors import TritonClientError
from clients.generator import Piece

from .. import logprobs, streams
from ..protocol import Call, bad_request, from_triton
from ..responses import Envelope, Tagged, Tally, choices, chunk, chunk_event, usage_chunk, whole
from .lookup import engine_of, llm_route


async def answer(request: Request, call: Call, chat: bool) -> Response:
    engine = engine_of(request)
    route = await llm_route(engine, call.model)
    llm = route.llm
    if chat and not llm.chat:
        raise bad_request(f"model `{llm.name}` takes no chat messages (no `messages` input): use "
                          "/v1/completions", "messages")  # fmt: skip
    with_priority = "priority" in llm.inputs
    answers = [
        engine.pieces(llm.name, call.fields(with_priority, route.lora_name, i, not llm.limits_output))
        for i in range(len(call.prompts))
    ]
    env = Envelope.new(call.model or llm.name, chat)  # an adapter's answers carry its name, as vLLM's do
    if not call.stream:
        try:
            return await streams.unless_gone(request, _whole(env, call, answers))
        finally:
            await streams.close_all(answers)
    # The first responses decide the status: a refusal or a bad request is an error, not a stream.
    try:
        firsts = await streams.together([streams.first(s) for s in answers])
    except BaseException:
        await streams.close_all(answers)
        raise
    events = _events(env, call, streams.merged(firsts, answers))
    return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _whole(env: Envelope, call: Call, answers: Sequence[AsyncGenerator[Piece, None]]) -> Response:
    firsts = await streams.together([streams.first(s) for s in answers])
    rests = await streams.together([streams.rest(s) for s in answers])
    tagged = [(i, p) for i, (f, r) in enumerate(zip(firsts, rests, strict=True)) for p in (f, *r) if p]
    return _json(whole(env, tagged, call.n, _echoed(call), call.top_logprobs))


def _echoed(call: Call) -> tuple[str, ...]:
    return tuple(str(p) for p in call.prompts) if call.echo else ()


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


def _sse(model: BaseModel) -> str:
    return f"data: {model.model_dump_json(exclude_unset=True)}\n\n"


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(exclude_unset=True), media_type="application/json")
