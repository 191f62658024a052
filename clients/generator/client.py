"""The sync generator: `core`'s requests over gRPC (``ModelStreamInfer``) and HTTP
(``generate`` / ``generate_stream``, server-sent events)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import urllib3
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


def read_to_end(call: Any) -> None:
    """Wait for a stream's status once its request has ended. tritonserver (2.51) keeps the request
    of a stream cancelled while it is finishing it, and the model with it, so a stop would wait out
    its exit timeout: only a stream left early is cancelled."""
    with contextlib.suppress(grpc.RpcError):
        for _ in call:
            pass


class Generator:
    """`Generator("127.0.0.1:8001", "smollm2").generate("Hi")` -> Generation; `.stream(...)` -> pieces.

    `timeout` (s) bounds each call (None: none). Lower `priority` runs first (vLLM's convention;
    the model's engine needs ``scheduling_policy: priority``); None sends none.
    """

    def __init__(
        self, url: str, model: str, protocol: str | None = None, *, timeout: float | None = None
    ) -> None:
        self.address, self.protocol = parse_url(url, protocol)
        self.model, self.timeout = model, timeout
        if self.protocol == "grpc":
            import grpc
            from tritonclient.grpc import service_pb2_grpc

            self._channel = grpc.insecure_channel(self.address)
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        else:
            self._pool = urllib3.PoolManager(maxsize=64, block=False, retries=False)
        self._inputs: frozenset[str] | None = None

    def generate(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> Generation:  # fmt: skip
        """The whole generation in one response (not streamed); ``lora_name``: one of the model's
        LoRA adapters (None: the base model)."""
        fields = request_fields(prompt, False, max_tokens, temperature, top_p, stop, priority,
                                with_lora(sampling, lora_name))  # fmt: skip
        return join(list(self._pieces(fields)))

    def stream(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> Iterator[str]:  # fmt: skip
        """Text pieces as the server makes them (empty ones left out)."""
        pieces = self.stream_pieces(
            prompt, max_tokens, temperature, top_p, stop, priority, lora_name, **sampling
        )
        for piece in pieces:
            if piece.text:
                yield piece.text

    def stream_pieces(
        self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
        stop: Sequence[str] | None = None, priority: int | None = None, lora_name: str | None = None,
        **sampling: Any,
    ) -> Iterator[Piece]:  # fmt: skip
        """Every streamed response with its finish reason and token counts."""
        fields = request_fields(prompt, True, max_tokens, temperature, top_p, stop, priority,
                                with_lora(sampling, lora_name))  # fmt: skip
        yield from self._pieces(fields)

    def _pieces(self, fields: dict[str, Any]) -> Iterator[Piece]:
        try:
            if any(name in fields for name in EXTENSIONS):
                fit_to_model(fields, self._model_inputs(), self.model)
            if self.protocol == "grpc":
                yield from self._grpc_pieces(fields)
            else:
                yield from self._http_pieces(fields)
        except TritonClientError:
            raise
        except Exception as exc:
            raise translate(exc) from exc

    def _model_inputs(self) -> frozenset[str]:
        """The model's input names, read from its metadata once."""
        if self._inputs is None:
            if self.protocol == "grpc":
                request = service_pb2.ModelMetadataRequest(name=self.model)
                metadata = json_format.MessageToDict(self._stub.ModelMetadata(request, timeout=self.timeout))
            else:
                url = f"http://{self.address}/v2/models/{self.model}"
                reply = self._pool.request(
                    "GET", url, timeout=urllib3.Timeout(connect=10.0, read=self.timeout)
                )
                if reply.status != 200:
                    raise http_status_error(reply.status, reply.data)
                metadata = json.loads(reply.data)
            self._inputs = model_inputs(metadata)
        return self._inputs

    def _grpc_pieces(self, fields: dict[str, Any]) -> Iterator[Piece]:
        call = self._stub.ModelStreamInfer(iter([grpc_request(self.model, fields)]), timeout=self.timeout)
        try:
            for response in call:
                if ends_request(response):
                    read_to_end(call)
                piece, final = piece_from_grpc(response)
                if piece is not None:
                    yield piece
                if final:
                    return
        finally:
            call.cancel()  # a no-op once the stream ended; cancels the request when closed early

    def _http_pieces(self, fields: dict[str, Any]) -> Iterator[Piece]:
        stream = bool(fields["stream"])
        url = http_url(self.address, self.model, stream)
        timeout = urllib3.Timeout(connect=10.0, read=self.timeout)
        reply = self._pool.request(
            "POST", url, body=json.dumps(fields).encode(), headers={"Content-Type": "application/json"},
            preload_content=False, timeout=timeout,
        )  # fmt: skip
        complete = False
        try:
            if reply.status != 200:
                raise http_status_error(reply.status, reply.read())
            if not stream:
                yield piece_from_json(json.loads(reply.read()))
            else:
                for event in sse_events(iter(reply.readline, b"")):
                    yield piece_from_json(event)
            complete = True
        finally:
            if complete:
                reply.release_conn()
            else:  # stopped early: dropping the connection cancels the request on the server
                reply.close()

    def close(self) -> None:
        if self.protocol == "grpc":
            self._channel.close()
        else:
            self._pool.clear()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
