"""gRPC ``ModelInfer`` requests written as the bytes gRPC sends, each input tensor copied once.

tritonclient copies an input three times before the socket: ``tobytes()`` in
``set_data_from_numpy``, into the protobuf message (``raw_input_contents.extend``), and into the
bytes gRPC serializes; in a fresh process each copy of a large tensor also faults its pages in. On
a host whose cores the server shares, that CPU is the model's: for an image to the served resnet18
at concurrency 1, the client's CPU a call and the latency both fall when the request is written as
here (`bench/client_overhead.py`; its figures in docs/clients.md).

Here protobuf encodes the request without its tensors (tritonclient's own encoding of the model,
the tensors' names, shapes and shared-memory parameters, the outputs and the request parameters),
and each tensor's bytes follow it as a ``raw_input_contents`` field: protobuf's wire format reads the
entries of a repeated field in the order they come, wherever they come in the message, so the
request parses exactly as tritonclient's (tests/clients/test_wire.py compares the two). The bytes
are joined once, straight from the arrays' memory, and go out as tritonclient's ``infer`` sends
its request: on its client's channel, with its plugins' headers, printed when it is verbose.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.grpc._utils import _get_inference_request  # tritonclient's encoding of the rest
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from .model import Arrays

METHOD = "/inference.GRPCInferenceService/ModelInfer"
RAW_INPUT_CONTENTS = service_pb2.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_CONTENTS_TAG = bytes([RAW_INPUT_CONTENTS << 3 | 2])  # a length-delimited field
# tritonclient's ``infer`` defaults for the request's other fields
INFER_DEFAULTS: dict[str, Any] = {
    "request_id": "", "sequence_id": 0, "sequence_start": False, "sequence_end": False,
    "priority": 0, "timeout": None, "parameters": None,
}  # fmt: skip


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def contents(types: Mapping[str, str], arrays: Arrays, skip: Collection[str] = ()) -> list[Any]:
    """Each input's bytes in order, as tritonclient's ``set_data_from_numpy`` makes them (BYTES
    serialized, others the array's C-order memory, not copied), except those in ``skip`` (shared
    memory)."""
    out: list[Any] = []
    for name, array in arrays.items():
        if name in skip:
            continue
        if types[name] == "BYTES":
            serialized = serialize_byte_tensor(array)
            out.append(serialized.item() if serialized.size > 0 else b"")
        else:
            out.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return out


def encode(header: service_pb2.ModelInferRequest, tensors: Sequence[Any]) -> bytes:
    """The request's bytes: ``header`` (no ``raw_input_contents`` of its own), then ``tensors``."""
    if header.raw_input_contents:
        raise ValueError("the header carries raw_input_contents already")
    parts: list[Any] = [header.SerializeToString()]
    for data in tensors:
        parts += (_CONTENTS_TAG, _varint(memoryview(data).nbytes), data)
    return b"".join(parts)


def request(
    model: str,
    version: str,
    inputs: list[Any],
    outputs: list[Any],
    tensors: Sequence[Any],
    arguments: Mapping[str, Any],
) -> bytes:
    """The bytes of a ``ModelInfer`` request: tritonclient's InferInputs (shapes, types, shared
    memory; no data) and InferRequestedOutputs, ``tensors`` (`contents`) and the keyword arguments
    of tritonclient's ``infer`` beyond the tensors (`core.Call.arguments`)."""
    fields = {**INFER_DEFAULTS, **arguments}  # an argument tritonclient does not know raises here
    header = _get_inference_request(
        model_name=model, inputs=inputs, model_version=version, outputs=outputs, **fields
    )
    return encode(header, tensors)


def _error(exc: grpc.RpcError) -> InferenceServerException:
    """What tritonclient raises for the same failure (its ``get_error_grpc``)."""
    call: Any = exc
    return InferenceServerException(
        msg=call.details(), status=str(call.code()), debug_details=call.debug_error_string()
    )


class _Sending:
    """What both senders do around the call, as tritonclient's ``infer`` does: the channel of the
    tritonclient client (``triton``: its connection, so that a server it saw ready is the one
    inference meets; closed with it), the headers of its plugins (``register_plugin``), and its
    verbose printing."""

    def __init__(self, triton: Any) -> None:
        self._triton = triton
        self._call = triton._channel.unary_unary(
            METHOD, response_deserializer=service_pb2.ModelInferResponse.FromString
        )

    def _metadata(self, data: bytes) -> Any:
        metadata = self._triton._get_metadata(None)
        if self._triton._verbose:
            print(f"infer, metadata {metadata}\n{service_pb2.ModelInferRequest.FromString(data)}")
        return metadata

    def _result(self, response: service_pb2.ModelInferResponse) -> InferResult:
        if self._triton._verbose:
            print(response)
        return InferResult(response)


class Sender(_Sending):
    """``ModelInfer`` with requests already in bytes, on tritonclient.grpc's client's channel."""

    def infer(self, data: bytes, timeout: float | None) -> InferResult:
        metadata = self._metadata(data)
        try:
            response = self._call(data, metadata=metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise _error(exc) from None
        return self._result(response)


class AsyncSender(_Sending):
    """`Sender` on tritonclient.grpc.aio's client's channel."""

    async def infer(self, data: bytes, timeout: float | None) -> InferResult:
        metadata = self._metadata(data)
        try:
            response = await self._call(data, metadata=metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise _error(exc) from None
        return self._result(response)
