"""The Triton side: which models are LLMs, and one ``ModelStreamInfer`` call per request.

An LLM is a ready decoupled model with the vLLM-backend interface (``text_input`` and
``sampling_parameters`` inputs), so the ``local`` model and Triton's own vLLM backend both
qualify; a model with a ``messages`` input takes chats (it renders its own chat template).
A model's LoRA adapters (its config parameter ``lora_names``, which the builder writes beside
``multi_lora.json``) are models of their own here, as vLLM's own server lists them: a request
naming one goes to its base model with that ``lora_name``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from clients.errors import TritonClientError, translate
from clients.generator import Piece, grpc_request, pieces_of
from clients.vllm_engine_contract import LORA_NAMES

REFRESH_S = 2.0  # how long the list of models is reused before Triton is asked again


@dataclass(frozen=True)
class LLM:
    name: str
    inputs: frozenset[str]
    adapters: tuple[str, ...] = ()  # its LoRA adapters' names

    @property
    def chat(self) -> bool:
        return "messages" in self.inputs


@dataclass(frozen=True)
class Route:
    """Where a request's ``model`` goes: an LLM, and the adapter (None: the base model)."""

    llm: LLM
    lora_name: str | None = None


def adapter_names(config: Any) -> tuple[str, ...]:
    """The ``lora_names`` parameter of a model config; () when unset or not a list of names."""
    text = config.parameters[LORA_NAMES].string_value if LORA_NAMES in config.parameters else ""
    try:
        names = json.loads(text) if text else []
    except json.JSONDecodeError:
        return ()
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


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

    async def route(self, name: str) -> Route | None:
        """The LLM named ``name``, else the one whose adapter it names (a model's own name first)."""
        for fresh in (False, True):
            models = await self.models(fresh=fresh)
            if name in models:
                return Route(models[name])
            owner = next((llm for llm in models.values() if name in llm.adapters), None)
            if owner is not None:
                return Route(owner, name)
        return None

    async def _fetch(self) -> dict[str, LLM]:
        index = await self._stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        found: dict[str, LLM] = {}
        for model in index.models:
            if model.state != "READY" or model.name in found:
                continue
            reply = await self._stub.ModelConfig(service_pb2.ModelConfigRequest(name=model.name))
            if is_llm(reply.config):
                inputs = frozenset(i.name for i in reply.config.input)
                found[model.name] = LLM(model.name, inputs, adapter_names(reply.config))
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
