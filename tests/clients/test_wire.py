"""clients.wire: the request's bytes parse exactly as the request tritonclient builds and sends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from clients import wire
from clients.core import Call, Part
from clients.model import ModelInfo
from clients.protocol import make_inputs, make_outputs
from clients.retry import Deadline
from clients.sequence import SequenceState


def tritonclients(
    arrays: dict[str, np.ndarray],
    types: dict[str, str],
    outputs: list[str],
    class_count: int = 0,
    **arguments: Any,
) -> service_pb2.ModelInferRequest:
    """The request tritonclient's own `infer` sends for the same call."""
    inputs = make_inputs(grpcclient, types, arrays, skip=())
    requested = make_outputs(grpcclient, outputs, class_count)
    return _get_inference_request(
        model_name="m", inputs=inputs, model_version="2", request_id="", outputs=requested,
        sequence_id=arguments.get("sequence_id", 0), sequence_start=arguments.get("sequence_start", False),
        sequence_end=arguments.get("sequence_end", False), priority=0, timeout=None,
        parameters=arguments.get("parameters"),
    )  # fmt: skip


def ours(
    arrays: dict[str, np.ndarray],
    types: dict[str, str],
    outputs: list[str],
    class_count: int = 0,
    **arguments: Any,
) -> service_pb2.ModelInferRequest:
    inputs = make_inputs(grpcclient, types, arrays, skip=arrays.keys())
    requested = make_outputs(grpcclient, outputs, class_count)
    data = wire.request("m", "2", inputs, requested, wire.contents(types, arrays), arguments)
    assert isinstance(data, bytes)
    return service_pb2.ModelInferRequest.FromString(data)


CASES: dict[str, tuple[dict[str, np.ndarray], dict[str, str]]] = {
    "image": (
        {"input": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)},
        {"input": "FP32"},
    ),
    "several types": (
        {
            "ids": np.arange(12, dtype=np.int64).reshape(2, 6),
            "mask": np.ones((2, 6), np.int32),
            "half": np.linspace(0, 1, 8, dtype=np.float16).reshape(2, 4),
            "flag": np.array([[True], [False]]),
            "byte": np.array([[1], [255]], np.uint8),
        },
        {"ids": "INT64", "mask": "INT32", "half": "FP16", "flag": "BOOL", "byte": "UINT8"},
    ),
    "not contiguous": ({"x": np.arange(24, dtype=np.float32).reshape(4, 6).T}, {"x": "FP32"}),
    "texts": (
        {
            "text": np.array([["héllo"], [b"\x00raw"], [""]], dtype=object),
            "n": np.array([[1], [2], [3]], np.int32),
        },
        {"text": "BYTES", "n": "INT32"},
    ),
    "empty": (
        {"x": np.zeros((0, 4), np.float32), "t": np.array([], dtype=object)},
        {"x": "FP32", "t": "BYTES"},
    ),
    "a large input (multi-byte length)": ({"x": np.ones((3, 70_000), np.float32)}, {"x": "FP32"}),
}


@pytest.mark.parametrize("case", CASES)
def test_the_request_parses_as_tritonclients(case: str) -> None:
    arrays, types = CASES[case]
    assert ours(arrays, types, ["out"]) == tritonclients(arrays, types, ["out"])


@pytest.mark.parametrize(
    "arguments",
    [
        {"sequence_id": 42, "sequence_start": True, "sequence_end": False},
        {"sequence_id": "conversation-7", "sequence_start": False, "sequence_end": True},
        {"parameters": {"threshold": 0.25, "top": 3, "label": "cat", "exact": True}},
    ],
    ids=["int sequence", "string sequence", "request parameters"],
)
def test_arguments_and_classification_as_tritonclients(arguments: dict[str, Any]) -> None:
    arrays, types = CASES["image"]
    expected = tritonclients(arrays, types, ["out", "logits"], class_count=3, **arguments)
    assert ours(arrays, types, ["out", "logits"], class_count=3, **arguments) == expected


def test_an_input_in_shared_memory_carries_no_bytes_and_its_region() -> None:
    arrays = {"a": np.ones((1, 4), np.float32), "b": np.arange(4, dtype=np.int32).reshape(1, 4)}
    types = {"a": "FP32", "b": "INT32"}
    inputs = make_inputs(grpcclient, types, arrays, skip=arrays.keys())
    inputs[0].set_shared_memory("region-a", 16, offset=0)
    data = wire.request("m", "", inputs, [], wire.contents(types, arrays, skip={"a"}), {})
    request = service_pb2.ModelInferRequest.FromString(data)
    assert request.raw_input_contents == [arrays["b"].tobytes()]
    assert request.inputs[0].parameters["shared_memory_region"].string_param == "region-a"
    assert "shared_memory_region" not in request.inputs[1].parameters


def test_a_header_with_contents_of_its_own_is_refused() -> None:
    header = service_pb2.ModelInferRequest(model_name="m", raw_input_contents=[b"x"])
    with pytest.raises(ValueError, match="raw_input_contents already"):
        wire.encode(header, [b"y"])


def test_a_calls_request_is_its_sequence_step_and_parameters() -> None:
    """`Call.request` passes the call's own arguments: the sequence's flags and the parameters."""
    tensor = {"datatype": "FP32", "shape": ["-1", "4"]}
    metadata = {"name": "vad", "versions": ["1"], "inputs": [{"name": "X", **tensor}],
                "outputs": [{"name": "Y", **tensor}]}  # fmt: skip
    info = ModelInfo.from_triton(metadata, {"name": "vad", "max_batch_size": 8, "sequence_batching": {}})
    state = SequenceState("vad", 9)
    step = state.step(info, end=False)
    arrays = {"X": np.ones((1, 4), np.float32)}
    call = Call(info, "", [Part(arrays, 1)], ["Y"], 0, False, Deadline(None), step, {"gain": 2})
    request = service_pb2.ModelInferRequest.FromString(call.request(grpcclient, call.parts[0], None))
    assert request.parameters["sequence_id"].int64_param == 9
    assert request.parameters["sequence_start"].bool_param is True
    assert request.parameters["gain"].int64_param == 2
    assert request.raw_input_contents == [arrays["X"].tobytes()]
