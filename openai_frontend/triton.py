"""The engine the endpoint serves with (`TritonEngine`, tritonserver's gRPC endpoint): which
models are LLMs, and one ``ModelStreamInfer`` call per request.

An LLM is a ready decoupled model with the vLLM-backend interface (``text_input`` and
``sampling_parameters`` inputs), so the ``local`` model and Triton's own vLLM backend both
qualify; a model with a ``messages`` input takes chats (it renders its own chat template).
A model's LoRA adapters (its config parameter ``lora_names``, which the builder writes beside
``multi_lora.json``) are models of their own here, as vLLM's own server lists them: a request
naming one goes to its base model with that ``lora_name``. Text-embedding models (``embedders``)
are listed beside the LLMs and answer ``/v1/embeddings`` with one ``ModelInfer`` per batch of texts;
rerankers (``rerankers``) answer ``/v1/rerank`` and ``/v1/score`` with one per batch of pairs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import grpc
import grpc.aio
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from clients.errors import TritonClientError, translate
from clients.generator import Piece, grpc_request, pieces_of
from clients.vllm_engine_contract import LORA_NAMES, SAMPLING_DEFAULTS

from .embedders import embedder
from .engine import LLM, Catalog, Embedder, Reranker, Route
from .rerankers import max_length, reranker

_DTYPES = {"FP32": "<f4", "INT64": "<i8", "INT32": "<i4"}
REFRESH_S = 2.0  # how long the list of models is reused before Triton is asked again


def adapter_names(config: Any) -> tuple[str, ...]:
    """The ``lora_names`` parameter of a model config; () when unset or not a list of names."""
    text = config.parameters[LORA_NAMES].string_value if LORA_NAMES in config.parameters else ""
    try:
        names = json.loads(text) if text else []
    except json.JSONDecodeError:
        return ()
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def limits_output(config: Any) -> bool:
    """Whether the ``sampling_defaults`` parameter of a model config sets ``max_tokens``."""
    text = config.parameters[SAMPLING_DEFAULTS].string_value if SAMPLING_DEFAULTS in config.parameters else ""
    try:
        defaults = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return False
    return isinstance(defaults, dict) and defaults.get("max_tokens") is not None


def is_llm(config: Any) -> bool:
    names = {i.name for i in config.input}
    return bool(config.model_transaction_policy.decoupled) and {"text_input", "sampling_parameters"} <= names


class TritonEngine:
    """Talks to tritonserver's gRPC endpoint at ``url`` (host:port). Its channel opens on the first
    call, on the event loop that serves the app, and ``close`` ends it (a later call opens another)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._channel: grpc.aio.Channel | None = None
        self._stub_: Any = None
        self._catalog = Catalog()
        self._fetched = 0.0
        self._refreshing: asyncio.Task[None] | None = None

    @property
    def _stub(self) -> Any:
        if self._channel is None:
            options = [("grpc.max_receive_message_length", -1)]
            self._channel = grpc.aio.insecure_channel(self.url, options=options)
            self._stub_ = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub_

    async def catalog(self, fresh: bool = False) -> Catalog:
        """The served models. A list older than REFRESH_S is still answered at once while a new
        one is fetched beside the request, so no request waits on Triton's repository index (two
        round trips: without them the endpoint's time before its gRPC call went from 4.5 to 0.8 ms
        p50 at one stream under aiperf). ``fresh`` waits for a new list (``route`` asks for one
        when a name is not in the last)."""
        if fresh or not self._fetched:
            return await self._refresh()
        if time.monotonic() - self._fetched > REFRESH_S and self._refreshing is None:
            self._refreshing = asyncio.create_task(self._refresh_beside())
        return self._catalog

    async def _refresh(self) -> Catalog:
        try:
            self._catalog = await self._fetch()
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        self._fetched = time.monotonic()
        return self._catalog

    async def _refresh_beside(self) -> None:
        """A refresh no request waits for: a failure keeps the last list (the request that meets
        the server's trouble reports it)."""
        try:
            await self._refresh()
        except TritonClientError:
            pass
        finally:
            self._refreshing = None

    async def route(self, name: str) -> Route | None:
        """The LLM named ``name``, else the one whose adapter it names (a model's own name first)."""
        for fresh in (False, True):
            models = (await self.catalog(fresh)).llms
            if name in models:
                return Route(models[name])
            owner = next((llm for llm in models.values() if name in llm.adapters), None)
            if owner is not None:
                return Route(owner, name)
        return None

    async def _fetch(self) -> Catalog:
        index = await self._stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        found = Catalog()
        for model in index.models:
            if model.state != "READY" or any(model.name in m for m in (found.llms, found.embedders,
                                                                        found.rerankers)):  # fmt: skip
                continue
            reply = await self._stub.ModelConfig(service_pb2.ModelConfigRequest(name=model.name))
            if is_llm(reply.config):
                inputs = frozenset(i.name for i in reply.config.input)
                config = reply.config
                found.llms[model.name] = LLM(model.name, inputs, adapter_names(config), limits_output(config))
            elif (embedding := embedder(reply.config)) is not None:
                found.embedders[model.name] = embedding
            elif (ranking := reranker(reply.config)) is not None:
                found.rerankers[model.name] = await self._with_length(ranking)
        return found

    async def _with_length(self, model: Reranker) -> Reranker:
        """The reranker with its tokenizer step's ``max_length`` (a step not served: unknown)."""
        if model.tokenizer is None:
            return model
        try:
            reply = await self._stub.ModelConfig(service_pb2.ModelConfigRequest(name=model.tokenizer))
        except grpc.aio.AioRpcError:
            return model
        return replace(model, max_tokens=max_length(reply.config))

    async def rerank(
        self, model: Reranker, pairs: Sequence[tuple[str, str]]
    ) -> tuple[np.ndarray[Any, Any], list[int]]:
        """Each pair's score ([len] float32) and its tokens before truncation (0 each when the model
        does not count them); batches of the model's max_batch_size at once, of pairs of like
        length (sorted by characters, as sentence-transformers sorts a batch), so that little of a
        batch is padding."""
        size = model.batch or len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        batches = [[pairs[i] for i in order[j : j + size]] for j in range(0, len(pairs), size)]
        try:
            done = await asyncio.gather(*[self._pairs_infer(model, b) for b in batches])
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        scores = np.empty(len(pairs), dtype=np.float32)
        tokens = [0] * len(pairs)
        taken = ((s, n) for batch_scores, counts in done for s, n in zip(batch_scores, counts, strict=True))
        for i, (s, n) in zip(order, taken, strict=True):
            scores[i], tokens[i] = s, int(n)
        return scores, tokens

    async def _pairs_infer(
        self, model: Reranker, pairs: list[tuple[str, str]]
    ) -> tuple[np.ndarray[Any, Any], list[int]]:
        request = service_pb2.ModelInferRequest(model_name=model.name)
        for name, column in ((model.query_input, 0), (model.document_input, 1)):
            tensor = request.inputs.add(name=name, datatype="BYTES", shape=[len(pairs), *model.shape_tail])
            tensor.contents.bytes_contents.extend(pair[column].encode("utf-8") for pair in pairs)
        wanted = [model.score_output, *([model.tokens_output] if model.tokens_output else [])]
        for name in wanted:
            request.outputs.add(name=name)
        reply = await self._stub.ModelInfer(request)
        arrays = {
            out.name: np.frombuffer(reply.raw_output_contents[i], dtype=_DTYPES[out.datatype]).reshape(-1)
            for i, out in enumerate(reply.outputs)
        }
        counts = arrays[model.tokens_output].tolist() if model.tokens_output else [0] * len(pairs)
        return arrays[model.score_output], [int(n) for n in counts]

    async def embed(self, model: Embedder, texts: Sequence[str]) -> tuple[np.ndarray[Any, Any], list[int]]:
        """The vectors of ``texts`` ([len, D] float32) and each text's token count (0 each when the
        model has no tokenizer step to count with); batches of the model's max_batch_size at once."""
        size = model.batch or len(texts)
        batches = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
        vectors = [
            self._texts_infer(model.name, model.text_input, model.shape_tail, b, model.output)
            for b in batches
        ]
        counts = []
        if model.tokenizer is not None:
            tok = model.tokenizer
            counts = [self._texts_infer(tok.model, tok.text_input, (1,), b, tok.mask_output) for b in batches]
        try:
            done = await asyncio.gather(*vectors, *counts)
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        found = np.concatenate(done[: len(batches)]).reshape(len(texts), model.dims)
        masks = done[len(batches) :]
        tokens = [int(row.sum()) for mask in masks for row in mask.reshape(mask.shape[0], -1)]
        return found.astype(np.float32, copy=False), tokens or [0] * len(texts)

    async def _texts_infer(
        self, model: str, name: str, tail: tuple[int, ...], texts: list[str], output: str
    ) -> np.ndarray[Any, Any]:
        request = service_pb2.ModelInferRequest(model_name=model)
        tensor = request.inputs.add(name=name, datatype="BYTES", shape=[len(texts), *tail])
        tensor.contents.bytes_contents.extend(t.encode("utf-8") for t in texts)
        request.outputs.add(name=output)
        reply = await self._stub.ModelInfer(request)
        out = reply.outputs[0]
        array = np.frombuffer(reply.raw_output_contents[0], dtype=_DTYPES[out.datatype])
        return array.reshape(tuple(out.shape))

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
            call.cancel()  # nothing once pieces_of read the stream to its end; else cancels the request

    async def close(self) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
            self._refreshing = None
        channel, self._channel, self._stub_ = self._channel, None, None
        self._catalog, self._fetched = Catalog(), 0.0
        if channel is not None:
            await channel.close()
