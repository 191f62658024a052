"""The asyncio generator: `core`'s requests over grpc.aio and aiohttp."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2

from ..errors import TritonClientError, translate
from ..protocol import parse_url
from .core import (
    EXTENSIONS,
    Generation,
    Piece,
    Prompt,
    ends_request,
    fit_to_model,
    grpc_request,
    http_status_error,
    http_url,
    join,
    model_inputs,
    piece_from_grpc,
    piece_from_json,
    request_fields,
    sse_events,
    with_lora,
)


async def pieces_of(call: Any) -> AsyncIterator[Piece]:
    """The pieces of one gRPC ``ModelStreamInfer`` call (an async iterator of responses), up to its
    final response; the caller owns the call and cancels it, which does nothing once the stream
    ended. The stream is read to its end (its status) before the request's last response is handed
    on, as in the sync `Generator` (``client.read_to_end``): cancelling a stream tritonserver is
    finishing makes it keep the model."""
    async for response in call:
        if ends_request(response):
            with contextlib.suppress(grpc.RpcError):
                async for _ in call:
                    pass
        piece, final = piece_from_grpc(response)
        if piece is not None:
            yield piece
        if final:
            return


class AsyncGenerator:
    """The asyncio twin of `Generator` (grpc.aio and aiohttp)."""

    def __init__(
        self, url: str, model: str, protocol: str | None = None, *, timeout: float | None = None
    ) -> None:
        self.address, self.protocol = parse_url(url, protocol)
        self.model, self.timeout = model, timeout
        self._channel: Any = None
        self._session: Any = None
        self._inputs: frozenset[str] | None = None

    def _grpc_stub(self) -> Any:
        if self._channel is None:
            import grpc.aio
            from tritonclient.grpc import service_pb2_grpc

            self._channel = grpc.aio.insecure_channel(self.address)
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    def _http_session(self) -> Any:
        if self._session is None:
            import aiohttp

            limit = aiohttp.TCPConnector(limit=0)
            self._session = aiohttp.ClientSession(connector=limit)
        return self._session

    async def generate(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> Generation:  # fmt: skip
        fields = request_fields(prompt, False, max_tokens, temperature, top_p, stop, priority,
                                with_lora(sampling, lora_name))  # fmt: skip
        return join([p async for p in self._pieces(fields)])

    async def stream(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> AsyncIterator[str]:  # fmt: skip
        async for piece in self.stream_pieces(
            prompt, max_tokens, temperature, top_p, stop, priority, lora_name, **sampling
        ):
            if piece.text:
                yield piece.text

    async def stream_pieces(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> AsyncIterator[Piece]:  # fmt: skip
        fields = request_fields(prompt, True, max_tokens, temperature, top_p, stop, priority,
                                with_lora(sampling, lora_name))  # fmt: skip
        async for piece in self._pieces(fields):
            yield piece

    async def _pieces(self, fields: dict[str, Any]) -> AsyncIterator[Piece]:
        try:
            if any(name in fields for name in EXTENSIONS):
                fit_to_model(fields, await self._model_inputs(), self.model)
            source = self._grpc_pieces(fields) if self.protocol == "grpc" else self._http_pieces(fields)
            async for piece in source:
                yield piece
        except TritonClientError:
            raise
        except Exception as exc:
            raise translate(exc) from exc

    async def _model_inputs(self) -> frozenset[str]:
        """The model's input names, read from its metadata once."""
        if self._inputs is None:
            if self.protocol == "grpc":
                request = service_pb2.ModelMetadataRequest(name=self.model)
                reply = await self._grpc_stub().ModelMetadata(request, timeout=self.timeout)
                metadata = json_format.MessageToDict(reply)
            else:
                import aiohttp

                url = f"http://{self.address}/v2/models/{self.model}"
                timeout = aiohttp.ClientTimeout(total=self.timeout)
                async with self._http_session().get(url, timeout=timeout) as response:
                    data = await response.read()
                    if response.status != 200:
                        raise http_status_error(response.status, data)
                metadata = json.loads(data)
            self._inputs = model_inputs(metadata)
        return self._inputs

    async def _grpc_pieces(self, fields: dict[str, Any]) -> AsyncIterator[Piece]:
        call = self._grpc_stub().ModelStreamInfer(
            iter([grpc_request(self.model, fields)]), timeout=self.timeout
        )
        try:
            async for piece in pieces_of(call):
                yield piece
        finally:
            call.cancel()

    async def _http_pieces(self, fields: dict[str, Any]) -> AsyncIterator[Piece]:
        import aiohttp

        stream = bool(fields["stream"])
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        url = http_url(self.address, self.model, stream)
        async with self._http_session().post(url, json=fields, timeout=timeout) as reply:
            if reply.status != 200:
                raise http_status_error(reply.status, await reply.read())
            if not stream:
                yield piece_from_json(json.loads(await reply.read()))
                return
            async for line in reply.content:
                for event in sse_events(iter([line])):
                    yield piece_from_json(event)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> AsyncGenerator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
