"""Helpers shared by the client tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from clients.model import ModelInfo
from clients.shm import leftover_keys, own_prefix


def simple_inputs(batch: int) -> dict[str, np.ndarray]:
    a = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    return {"INPUT0": a, "INPUT1": np.full((batch, 16), 3, dtype=np.int32) - a % 7}


def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"OUTPUT0": inputs["INPUT0"] + inputs["INPUT1"], "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"]}


def _count(triton: Any, model: str) -> int:
    stats = grpcclient.InferenceServerClient(triton.grpc_url).get_inference_statistics(model, as_json=True)
    infer = stats["model_stats"][0]["inference_stats"]
    return sum(int(infer.get(k, {}).get("count", 0)) for k in ("success", "fail"))


def request_count(triton: Any, model: str = "simple", expect: int | None = None) -> int:
    """Requests the server has counted for `model` (success + failure). Statistics are updated just
    after a response is sent, so wait until they settle (or reach `expect`)."""
    last, deadline = _count(triton, model), time.monotonic() + 3
    while time.monotonic() < deadline and last != expect:
        time.sleep(0.15)
        now = _count(triton, model)
        if now == last and expect is None:
            break
        last = now
    return last


def assert_no_regions(triton: Any) -> None:
    """No region of this process in /dev/shm, none registered with the server (other processes,
    such as a parallel test run, may have their own)."""
    assert leftover_keys() == []
    status = grpcclient.InferenceServerClient(triton.grpc_url).get_system_shared_memory_status(as_json=True)
    assert [r for r in status.get("regions", {}) if r.startswith(own_prefix())] == []


def tensor(name: str, datatype: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape}


def simple_info(max_batch_size: int = 8) -> ModelInfo:
    """`simple`'s signature as the HTTP client returns it (no server needed)."""
    dims = [-1, 16] if max_batch_size > 0 else [16]
    metadata = {
        "name": "simple",
        "versions": ["1"],
        "inputs": [tensor("INPUT0", "INT32", dims), tensor("INPUT1", "INT32", dims)],
        "outputs": [tensor("OUTPUT0", "INT32", dims), tensor("OUTPUT1", "INT32", dims)],
    }
    return ModelInfo.from_triton(metadata, {"name": "simple", "max_batch_size": max_batch_size})


def text_info() -> ModelInfo:
    """A text model: an optional BYTES input and an output with a dynamic dimension."""
    metadata = {
        "name": "text",
        "versions": ["1"],
        "inputs": [tensor("TEXT", "BYTES", [-1, 1]), tensor("SCALE", "FP32", [-1, 1])],
        "outputs": [tensor("TOKENS", "INT64", [-1, -1]), tensor("LABEL", "FP32", [-1, 4])],
    }
    config = {
        "name": "text",
        "max_batch_size": 4,
        "input": [{"name": "SCALE", "optional": True}],
        "output": [{"name": "LABEL", "label_filename": "labels.txt"}],
    }
    return ModelInfo.from_triton(metadata, config)


def wrap_sends(client: Any, wrapper: Callable[[str, Callable[[], Any]], Any]) -> None:
    """Route each request `client` (sync or asyncio) sends through ``wrapper(model, send)``, which
    returns ``send()``'s result (awaited, for the asyncio client): gRPC requests go out as bytes
    (`clients.wire`), HTTP ones through tritonclient's ``infer``."""
    if client._wire is not None:
        sender, original = client._wire, client._wire.infer

        def sent_bytes(data: bytes, timeout: float | None) -> Any:
            model = service_pb2.ModelInferRequest.FromString(data).model_name
            return wrapper(model, lambda: original(data, timeout))

        sender.infer = sent_bytes
        return
    infer = client.triton.infer

    def sent_call(model: str, *args: Any, **kwargs: Any) -> Any:
        return wrapper(model, lambda: infer(model, *args, **kwargs))

    client.triton.infer = sent_call
