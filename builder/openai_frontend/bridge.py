"""The Triton side: which models are LLMs, and one ``ModelStreamInfer`` call per request.

An LLM is a ready decoupled model with the vLLM-backend interface (``text_input`` and
``sampling_parameters`` inputs), so the ``local`` model and Triton's own vLLM backend both
qualify; a model with a ``messages`` input takes chats (it renders its own chat template).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from clients.errors import TritonClientError, translate
from clients.generator import Piece, grpc_request, pieces_of

REFRESH_S = 2.0  # how long the list of models is reused before Triton is asked again


@dataclass(frozen=True)
class LLM:
    name: str
    inputs: frozenset[str]

    @property
    def chat(self) -> bool:
        return "messages" in self.inputs


def is_llm(config: Any) -> bool:
    names = {i.name for i in config.input}
    return bool(config.model_transaction_policy.decoupled) and {"text_input", "sampling_parameters"} <= names


class TritonBridge:
    """Talks to tritonserver's gRPC endpoint at ``url`` (host:port); create inside the event loop."""

    def __init__(self, url: str) -> None:
        self._channel = grpc.aio.insecure_channel(url, options=[("grpc.max_receive_message_length", -1)])
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._models: dict[str, LLM] = {}
        self._fetched = 0.0

    async def models(self, fresh: bool = False) -> Mapping[str, LLM]:
        if fresh or time.monotonic() - self._fetched > REFRESH_S:
            try:
                self._models = await self._fetch()
            except grpc.aio.AioRpcError as exc:
                raise translate(exc) from exc
            self._fetched = time.monotonic()
        return self._models

    async def find(self, name: str) -> LLM | None:
        found = (await self.models()).get(name)
        return found if found is not None else (await self.models(fresh=True)).get(name)

    async def _fetch(self) -> dict[str, LLM]:
        index = await self._stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        found: dict[str, LLM] = {}
        for model in index.models:
            if model.state != "READY" or model.name in found:
                continue
            reply = await self._stub.ModelConfig(service_pb2.ModelConfigRequest(name=model.name))
            if is_llm(reply.config):
                found[model.name] = LLM(model.name, frozenset(i.name for i in reply.config.input))
        return found

    async def pieces(self, model: str, fields: Mapping[str, Any]) -> AsyncGenerator[Piece, None]:
        """The model's responses to one request; closing the iterator cancels it on the server."""
        call = self._stub.ModelStreamInfer(iter([grpc_request(model, fields)]))
        try:
            async for piece in pieces_of(call):
                yield piece
        except TritonClientError:
            raise
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        finally:
            call.cancel()

    async def close(self) -> None:
        await self._channel.close()
