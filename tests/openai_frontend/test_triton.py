"""How the endpoint learns a model's LoRA adapters from its config (``lora_names``), how a
request for an adapter reaches its base model, and how the list of served models is kept."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tritonclient.grpc import service_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from clients.vllm_engine_contract import LORA_NAMES, SAMPLING_DEFAULTS
from openai_frontend.protocol import parse_completion
from openai_frontend.triton import REFRESH_S, TritonEngine, adapter_names, limits_output


@pytest.mark.parametrize(
    ("value", "names"), [(None, ()), ('["sea", "sky"]', ("sea", "sky")), ("{", ()), ('"sea"', ())]
)
def test_adapter_names_come_from_the_config(value: str | None, names: tuple[str, ...]) -> None:
    config = ModelConfig(name="m")
    if value is not None:
        config.parameters[LORA_NAMES].string_value = value
    assert adapter_names(config) == names


def test_an_adapter_request_names_it_in_sampling_parameters() -> None:
    call = parse_completion({"model": "sea", "prompt": "Hi", "max_tokens": 4, "temperature": 0})
    sampling = json.loads(call.fields(with_priority=False, lora_name="sea")["sampling_parameters"])
    assert sampling["lora_name"] == "sea" and sampling["max_tokens"] == 4
    assert "lora_name" not in json.loads(call.fields(with_priority=False)["sampling_parameters"])


@pytest.mark.parametrize(
    ("value", "limits"),
    [
        (None, False),
        ('{"temperature": 0.5}', False),
        ('{"max_tokens": 64}', True),
        ("{", False),
        ("[]", False),
    ],
)
def test_a_models_sampling_defaults_may_set_its_output_limit(value: str | None, limits: bool) -> None:
    """Where they set max_tokens a request without one gets that, not the context's end."""
    config = ModelConfig(name="m")
    if value is not None:
        config.parameters[SAMPLING_DEFAULTS].string_value = value
    assert limits_output(config) is limits


class IndexStub:
    """Triton's repository index and model configs: ``asked`` is set when the index is asked for,
    and the answer waits until ``gate`` is set."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.gate, self.asked = asyncio.Event(), asyncio.Event()
        self.gate.set()
        self.calls = 0

    async def RepositoryIndex(self, request: Any) -> Any:
        self.calls += 1
        self.asked.set()
        await self.gate.wait()
        index = service_pb2.RepositoryIndexResponse.ModelIndex
        return service_pb2.RepositoryIndexResponse(models=[index(name=n, state="READY") for n in self.names])

    async def ModelConfig(self, request: Any) -> Any:
        config = ModelConfig(name=request.name)
        config.model_transaction_policy.decoupled = True
        for name in ("text_input", "sampling_parameters"):
            config.input.add(name=name)
        return service_pb2.ModelConfigResponse(config=config)


def test_a_stale_model_list_is_answered_at_once_and_renewed_beside_the_request() -> None:
    async def go() -> None:
        engine, stub = TritonEngine("127.0.0.1:1"), IndexStub(["a"])
        engine._channel, engine._stub_ = object(), stub  # type: ignore[assignment]
        assert list((await engine.catalog()).llms) == ["a"]
        engine._fetched -= REFRESH_S + 1
        stub.names, stub.gate, stub.asked = ["b"], asyncio.Event(), asyncio.Event()  # held until set
        stale = await asyncio.wait_for(engine.catalog(), timeout=10)
        assert list(stale.llms) == ["a"]  # answered while the new list is held
        await asyncio.wait_for(stub.asked.wait(), timeout=10)  # the refresh waits on the index
        assert stub.calls == 2
        assert list((await engine.catalog()).llms) == ["a"]  # one refresh at a time
        stub.gate.set()
        assert engine._refreshing is not None
        await engine._refreshing
        assert list((await engine.catalog()).llms) == ["b"] and stub.calls == 2
        stub.names, stub.gate, stub.asked = ["c"], asyncio.Event(), asyncio.Event()
        fresh = asyncio.ensure_future(engine.catalog(fresh=True))
        await asyncio.wait_for(stub.asked.wait(), timeout=10)
        assert not fresh.done()  # a fresh list is waited for: the index is held
        stub.gate.set()
        assert list((await fresh).llms) == ["c"]

    asyncio.run(go())


class InferStub:
    """Triton's ModelInfer for a reranker: a pair's score is its document's length; each request's
    pairs are recorded."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    async def ModelInfer(self, request: Any) -> Any:
        import numpy as np

        documents = [d.decode() for d in request.inputs[1].contents.bytes_contents]
        self.sent.append(documents)
        reply = service_pb2.ModelInferResponse()
        for name, dtype, values in (
            ("SCORE", "FP32", np.array([len(d) for d in documents], "<f4")),
            ("NUM_TOKENS", "INT64", np.array([len(d) + 3 for d in documents], "<i8")),
        ):
            reply.outputs.add(name=name, datatype=dtype, shape=[len(documents), 1])
            reply.raw_output_contents.append(values.tobytes())
        return reply  # fmt: skip


def test_pairs_go_in_batches_of_like_length_and_come_back_in_order() -> None:
    from openai_frontend.engine import Reranker

    async def go() -> tuple[Any, list[int], list[list[str]]]:
        engine, stub = TritonEngine("127.0.0.1:1"), InferStub()
        engine._channel, engine._stub_ = object(), stub  # type: ignore[assignment]
        model = Reranker("rr", "TEXT", "TEXT_PAIR", "SCORE", 2, (1,), "NUM_TOKENS")
        scores, tokens = await engine.rerank(model, [("q", d) for d in ("aaaa", "a", "aaaaa", "aa", "aaa")])
        return scores, tokens, stub.sent

    scores, tokens, sent = asyncio.run(go())
    assert scores.tolist() == [4, 1, 5, 2, 3] and tokens == [7, 4, 8, 5, 6]
    assert sent == [["a", "aa"], ["aaa", "aaaa"], ["aaaaa"]]  # shortest first, two a request
