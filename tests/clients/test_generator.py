"""Generator request building and response parsing (no server)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import service_pb2
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from clients.errors import (
    InvalidInput,
    InvalidResponse,
    RequestRejected,
    ServerUnavailable,
    TritonClientError,
)
from clients.generator import (
    AsyncGenerator,
    Completion,
    Generation,
    Generator,
    Piece,
    fit_to_model,
    grpc_request,
    join,
    model_inputs,
    piece_from_grpc,
    piece_from_json,
    request_fields,
    sse_events,
    stream_error,
)
from tests.conftest import ROOT


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


def test_the_logprobs_output_comes_with_its_piece_as_the_models_json() -> None:
    response = _grpc_response(" Paris", True)
    raw = b'[{"5": {"logprob": -0.1, "rank": 1, "decoded_token": " Paris"}}]'
    response.infer_response.outputs.add(name="logprobs", datatype="BYTES", shape=[1])
    response.infer_response.raw_output_contents.append(len(raw).to_bytes(4, "little") + raw)
    piece, _ = piece_from_grpc(response)
    assert piece is not None and piece.logprobs == raw.decode()
    assert piece_from_grpc(_grpc_response(" Paris", True))[0].logprobs is None  # type: ignore[union-attr]
    with_n = {"text_output": ["a", "b"], "logprobs": ["[1]", "[2]"]}
    assert piece_from_json(with_n) == Piece("a", None, 0, 0, (Completion("b", None, 0, "[2]"),), "[1]")


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


def test_n_completions_come_in_index_order_from_one_element_each() -> None:
    """As Triton's vLLM backend sends n > 1: every output has one element per completion."""
    steps = [
        {"text_output": ["", " b", ""], "finish_reason": ["None"] * 3, "num_output_tokens": [0, 1, 0]},
        {
            "text_output": [" a", " c", "!"],
            "finish_reason": ["length", "None", "stop"],
            "num_output_tokens": [1, 1, 1],
        },
        {
            "text_output": ["", "", ""],
            "finish_reason": ["length", "length", "stop"],
            "num_output_tokens": [0, 0, 0],
        },
    ]
    pieces = [piece_from_json({**body, "num_input_tokens": 4}) for body in steps]
    assert pieces[0] == Piece("", None, 4, 0, (Completion(" b", None, 1), Completion("", None, 0)))
    whole = join(pieces)
    assert whole.completions == (
        Completion(" a", "length", 1),
        Completion(" b c", "length", 2),
        Completion("!", "stop", 1),
    )
    assert (whole.text, whole.finish_reason, whole.num_input_tokens) == (" a", "length", 4)


def _golden_metadata(target: str) -> dict[str, Any]:
    """The model metadata Triton reports for the zoo's LLM entry of a target (its golden config)."""
    text = (ROOT / "tests" / "golden" / target / "smollm2" / "config.pbtxt").read_text()
    cfg = text_format.Parse(text, ModelConfig())
    metadata = service_pb2.ModelMetadataResponse(name=cfg.name, platform=cfg.backend)
    for i in cfg.input:
        metadata.inputs.add(name=i.name, datatype=DataType.Name(i.data_type)[5:], shape=list(i.dims))
    return json_format.MessageToDict(metadata)


CHAT = [{"role": "user", "content": "Hi"}]


def test_a_text_request_leaves_priority_out_unless_the_caller_sets_it() -> None:
    fields = request_fields("Hi", False, 8, 0.0, 1.0, None, None)
    assert "priority" not in fields
    gpu = model_inputs(_golden_metadata("gpu"))
    assert "text_input" in gpu and "priority" not in gpu and "messages" not in gpu
    assert fit_to_model(fields, gpu, "smollm2") == fields  # Triton's vLLM backend takes it as it is
    assert set(fields) <= gpu


def test_priority_or_chat_on_a_model_without_those_inputs_is_refused_clearly() -> None:
    gpu = model_inputs(_golden_metadata("gpu"))
    with pytest.raises(InvalidInput, match="model 'smollm2' has no priority input"):
        fit_to_model(request_fields("Hi", False, 8, 0.0, 1.0, None, 2), gpu, "smollm2")
    with pytest.raises(InvalidInput, match="model 'smollm2' has no messages input"):
        fit_to_model(request_fields(CHAT, False, 8, 0.0, 1.0, None, None), gpu, "smollm2")
    local = model_inputs(_golden_metadata("local"))
    chat = request_fields(CHAT, False, 8, 0.0, 1.0, None, 2)
    assert fit_to_model(chat, local, "smollm2") == chat and set(chat) <= local


class FakeGrpcStub:
    """A test double of the gRPC service stub: the golden gpu metadata, one final response."""

    def __init__(self) -> None:
        self.metadata_calls = 0
        self.sent: list[service_pb2.ModelInferRequest] = []

    def ModelMetadata(self, request: service_pb2.ModelMetadataRequest, timeout: Any = None) -> Any:
        self.metadata_calls += 1
        return json_format.ParseDict(_golden_metadata("gpu"), service_pb2.ModelMetadataResponse())

    def ModelStreamInfer(self, requests: Any, timeout: Any = None) -> Any:
        self.sent.extend(requests)

        class Call(list[Any]):
            def cancel(self) -> None:
                pass

        return Call([_grpc_response("Paris", True)])


def test_the_generator_reads_the_models_inputs_before_sending_priority_or_chat() -> None:
    with Generator("127.0.0.1:1", "smollm2") as gen:
        stub = FakeGrpcStub()
        gen._stub = stub
        assert gen.generate("Hi").text == "Paris" and stub.metadata_calls == 0  # nothing to check
        assert "priority" not in {t.name for t in stub.sent[0].inputs}
        with pytest.raises(InvalidInput, match="no priority input"):
            gen.generate("Hi", priority=1)
        with pytest.raises(InvalidInput, match="no messages input"):
            gen.generate(CHAT)
        assert stub.metadata_calls == 1 and len(stub.sent) == 1  # read once; nothing refused was sent


class FakeAioStub:
    """A test double of the grpc.aio service stub: the golden gpu metadata, one final response."""

    def __init__(self) -> None:
        self.metadata_calls = 0
        self.sent: list[service_pb2.ModelInferRequest] = []

    async def ModelMetadata(self, request: service_pb2.ModelMetadataRequest, timeout: Any = None) -> Any:
        self.metadata_calls += 1
        return json_format.ParseDict(_golden_metadata("gpu"), service_pb2.ModelMetadataResponse())

    def ModelStreamInfer(self, requests: Any, timeout: Any = None) -> Any:
        self.sent.extend(requests)

        class Call:
            async def __aiter__(self) -> Any:
                yield _grpc_response("Paris", True)

            def cancel(self) -> None:
                pass

        return Call()


def test_the_async_generator_checks_the_models_inputs_too() -> None:
    async def run() -> None:
        gen = AsyncGenerator("127.0.0.1:1", "smollm2")
        stub = FakeAioStub()
        gen._channel, gen._stub = object(), stub
        assert (await gen.generate("Hi")).text == "Paris" and stub.metadata_calls == 0
        assert "priority" not in {t.name for t in stub.sent[0].inputs}
        with pytest.raises(InvalidInput, match="no messages input"):
            await gen.generate(CHAT)
        with pytest.raises(InvalidInput, match="no priority input"):
            await gen.generate("Hi", priority=0)
        assert stub.metadata_calls == 1 and len(stub.sent) == 1

    asyncio.run(run())


class StreamCall:
    """A gRPC stream double: its responses, then its status (the end of iteration). Records a
    cancel that comes before the status: tritonserver 2.51 then keeps the request's model."""

    def __init__(self, responses: list[service_pb2.ModelStreamInferResponse]) -> None:
        self.left, self.ended, self.cancelled_open = list(responses), False, False

    def __iter__(self) -> StreamCall:
        return self

    def __next__(self) -> service_pb2.ModelStreamInferResponse:
        if self.left:
            return self.left.pop(0)
        self.ended = True
        raise StopIteration

    def __aiter__(self) -> StreamCall:
        return self

    async def __anext__(self) -> service_pb2.ModelStreamInferResponse:
        try:
            return next(self)
        except StopIteration:
            raise StopAsyncIteration from None

    def cancel(self) -> None:
        self.cancelled_open = self.cancelled_open or not self.ended


class StreamStub:
    """A service stub whose ModelStreamInfer answers with one StreamCall of the given responses."""

    def __init__(self, *responses: service_pb2.ModelStreamInferResponse) -> None:
        self.call = StreamCall(list(responses))

    def ModelStreamInfer(self, requests: Any, timeout: Any = None) -> StreamCall:
        list(requests)
        return self.call


def _final_error(message: str) -> service_pb2.ModelStreamInferResponse:
    response = service_pb2.ModelStreamInferResponse(error_message=message)
    response.infer_response.parameters["triton_final_response"].bool_param = True
    return response


def test_a_finished_stream_is_read_to_its_status_not_cancelled_and_one_left_early_is_cancelled() -> None:
    answers = (_grpc_response(" Par", False), _grpc_response("is", True))
    with Generator("127.0.0.1:1", "smollm2") as gen:
        gen._stub = whole = StreamStub(*answers)
        assert gen.generate("Hi").text == " Paris"
        assert whole.call.ended and not whole.call.cancelled_open
        gen._stub = last = StreamStub(*answers)
        pieces = gen.stream("Hi")
        assert [next(pieces), next(pieces)] == [" Par", "is"]
        pieces.close()  # the caller stops at the last piece: the stream had ended already
        assert last.call.ended and not last.call.cancelled_open
        gen._stub = refused = StreamStub(_final_error("text_input is empty"))
        with pytest.raises(InvalidInput):
            gen.generate("Hi")
        assert refused.call.ended and not refused.call.cancelled_open
        gen._stub = left = StreamStub(*answers)
        pieces = gen.stream("Hi")
        next(pieces)
        pieces.close()
        assert left.call.cancelled_open  # left early: the request is cancelled on the server


def test_the_async_generator_reads_a_finished_stream_to_its_status_too() -> None:
    async def run() -> tuple[StreamCall, StreamCall]:
        answers = (_grpc_response(" Par", False), _grpc_response("is", True))
        gen = AsyncGenerator("127.0.0.1:1", "smollm2")
        gen._channel, gen._stub = object(), StreamStub(*answers)
        whole = gen._stub.call
        assert (await gen.generate("Hi")).text == " Paris"
        gen._stub = StreamStub(*answers)
        pieces = gen.stream("Hi")
        await anext(pieces)
        await pieces.aclose()
        return whole, gen._stub.call

    whole, left = asyncio.run(run())
    assert whole.ended and not whole.cancelled_open
    assert left.cancelled_open


class FakeMetadataPool:
    """A test double of urllib3's pool answering only the metadata GET with the golden gpu model's."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        self.urls.append(f"{method} {url}")
        return SimpleNamespace(status=200, data=json.dumps(_golden_metadata("gpu")).encode())

    def clear(self) -> None:
        pass


def test_over_http_the_generator_reads_the_metadata_of_the_model() -> None:
    with Generator("http://127.0.0.1:1", "smollm2") as gen:
        pool = FakeMetadataPool()
        gen._pool = pool  # type: ignore[assignment]
        with pytest.raises(InvalidInput, match="model 'smollm2' has no messages input"):
            gen.generate(CHAT)
        assert pool.urls == ["GET http://127.0.0.1:1/v2/models/smollm2"]


def test_lora_name_goes_where_triton_vllm_backend_reads_it() -> None:
    from clients.generator import request_fields, with_lora

    fields = request_fields("Hi", False, 8, 0.0, 1.0, None, None, with_lora({}, "sea"))
    assert json.loads(fields["sampling_parameters"])["lora_name"] == "sea" and "lora_name" not in fields
    assert with_lora({"seed": 1}, None) == {"seed": 1}


def test_a_response_read_from_raw_contents_matches_tritonclients_reading() -> None:
    """Responses are read from their raw contents directly; one whose outputs come as typed
    ``contents`` instead (no raw contents) is read by tritonclient's InferResult."""
    response = _grpc_response(" Paris ", True, 3)
    infer = response.infer_response
    reason = infer.outputs.add(name="finish_reason", datatype="BYTES", shape=[1])
    infer.raw_output_contents.append(len(b"length").to_bytes(4, "little") + b"length")
    del reason
    infer.outputs.add(name="num_input_tokens", datatype="UINT32", shape=[1])
    infer.raw_output_contents.append(np.array([9], dtype=np.uint32).tobytes())
    assert piece_from_grpc(response) == (Piece(" Paris ", "length", 9, 3), True)
    typed = service_pb2.ModelStreamInferResponse()
    typed.infer_response.parameters["triton_final_response"].bool_param = False
    text = typed.infer_response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    text.contents.bytes_contents.append(b" Lyon")
    assert piece_from_grpc(typed) == (Piece(" Lyon", None, 0, 0), False)
