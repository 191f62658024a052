"""Generator request building and response parsing (no server)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from clients.errors import (
    InvalidInput,
    InvalidResponse,
    RequestRejected,
    ServerUnavailable,
    TritonClientError,
)
from clients.generator import (
    Generation,
    Piece,
    grpc_request,
    join,
    piece_from_grpc,
    piece_from_json,
    request_fields,
    sse_events,
    stream_error,
)


def test_request_fields_for_a_prompt_and_for_chat_messages() -> None:
    fields = request_fields("Hi", True, 8, 0.0, 1.0, ["\n"], 2, {"ignore_eos": True})
    assert fields["text_input"] == "Hi" and fields["stream"] is True and fields["priority"] == 2
    assert json.loads(fields["sampling_parameters"]) == {
        "max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "stop": ["\n"], "ignore_eos": True,
    }  # fmt: skip
    assert fields["exclude_input_in_output"] is True and fields["return_num_output_tokens"] is True
    chat = request_fields([{"role": "user", "content": "Hi"}], False, 8, 0.0, 1.0, None, 0)
    assert "text_input" not in chat and json.loads(chat["messages"]) == [{"role": "user", "content": "Hi"}]


def test_grpc_request_types_each_input() -> None:
    request = grpc_request("chat", {"text_input": "Hi", "stream": True, "priority": 3})
    assert request.model_name == "chat"
    assert request.parameters["triton_enable_empty_final_response"].bool_param
    by_name = {t.name: t for t in request.inputs}
    assert by_name["text_input"].datatype == "BYTES" and by_name["text_input"].contents.bytes_contents == [
        b"Hi"
    ]
    assert by_name["stream"].datatype == "BOOL" and list(by_name["stream"].contents.bool_contents) == [True]
    assert by_name["priority"].datatype == "INT32" and list(by_name["priority"].contents.int_contents) == [3]


def _grpc_response(text: str, final: bool, tokens: int = 1) -> service_pb2.ModelStreamInferResponse:
    response = service_pb2.ModelStreamInferResponse()
    infer = response.infer_response
    infer.parameters["triton_final_response"].bool_param = final
    data = text.encode()
    out = infer.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    infer.raw_output_contents.append(len(data).to_bytes(4, "little") + data)
    del out
    infer.outputs.add(name="num_output_tokens", datatype="UINT32", shape=[1])
    infer.raw_output_contents.append(np.array([tokens], dtype=np.uint32).tobytes())
    return response


def test_pieces_from_grpc_responses() -> None:
    piece, final = piece_from_grpc(_grpc_response(" Paris", False, 2))
    assert piece == Piece(" Paris", None, 0, 2) and not final
    empty = service_pb2.ModelStreamInferResponse()
    empty.infer_response.parameters["triton_final_response"].bool_param = True
    assert piece_from_grpc(empty) == (None, True)


def test_grpc_stream_errors_are_typed() -> None:
    with pytest.raises(InvalidInput, match="text_input is empty"):
        piece_from_grpc(service_pb2.ModelStreamInferResponse(error_message="text_input is empty"))
    assert isinstance(stream_error("engine is full: 16 requests running or waiting"), RequestRejected)
    assert isinstance(stream_error("failed to connect to all addresses"), ServerUnavailable)
    assert type(stream_error("generation failed: boom")) is TritonClientError
    assert isinstance(stream_error("whatever", "400"), InvalidInput)


def test_pieces_from_json_and_server_sent_events() -> None:
    body = {"text_output": "Paris.", "finish_reason": "stop", "num_input_tokens": 5, "num_output_tokens": 3}
    assert piece_from_json(body) == Piece("Paris.", "stop", 5, 3)
    assert piece_from_json({"text_output": "a", "finish_reason": "None"}).finish_reason is None
    with pytest.raises(RequestRejected):
        piece_from_json({"error": "engine is full: 4 requests running or waiting"})
    with pytest.raises(InvalidResponse, match="without text_output"):
        piece_from_json({"model_name": "m"})
    lines = [b'data: {"text_output": "a"}\n', b"\n", b": comment\n", b'data: {"text_output": "b"}\n']
    assert [e["text_output"] for e in sse_events(iter(lines))] == ["a", "b"]


def test_join_sums_token_deltas_and_keeps_the_last_reason() -> None:
    pieces = [Piece("The", None, 7, 1), Piece(" end", None, 7, 2), Piece("", "length", 7, 0)]
    assert join(pieces) == Generation("The end", "length", 7, 3)
    with pytest.raises(InvalidResponse):
        join([])
