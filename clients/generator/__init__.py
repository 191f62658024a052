"""Text generation from an LLM served with Triton's vLLM-backend interface (decoupled model).

`Generator(url).generate("prompt")` -> Generation; `.stream(...)` yields text pieces as the server
makes them. gRPC goes through ``ModelStreamInfer`` (decoupled models have no unary infer), HTTP
through ``/v2/models/M/generate`` and ``/generate_stream`` (server-sent events; ``/infer`` refuses
decoupled models). Chat messages are sent as JSON in the model's ``messages`` input: the server
renders them with the checkpoint's own chat template, so the client needs no tokenizer. Triton's own
vLLM backend (the ``gpu`` target) has neither ``messages`` nor ``priority``: a request sends
``priority`` only when the caller sets it, and a chat or a priority is checked against the model's
metadata first, refused with InvalidInput on a model without that input.
Stopping a stream early (closing the iterator) cancels the request on the server.
``lora_name`` picks one of the model's LoRA adapters, sent as Triton's vLLM backend takes it (the
``lora_name`` key of ``sampling_parameters``), so it works against both targets' models.
With the sampling parameter ``n`` > 1 (``generate(prompt, n=3)``), the other completions come in
``Generation.others`` and ``Piece.others`` (``Generation.completions`` has them all).

``core`` is the wire codec (no I/O), ``client`` the sync generator, ``aio`` the asyncio one.
"""

from .aio import AsyncGenerator, pieces_of
from .client import Generator
from .core import (
    EXTENSIONS,
    FIELDS,
    Completion,
    Generation,
    Piece,
    Prompt,
    fit_to_model,
    grpc_request,
    join,
    model_inputs,
    piece_from_grpc,
    piece_from_json,
    request_fields,
    sse_events,
    stream_error,
    with_lora,
)

__all__ = [
    "EXTENSIONS",
    "FIELDS",
    "AsyncGenerator",
    "Completion",
    "Generation",
    "Generator",
    "Piece",
    "Prompt",
    "fit_to_model",
    "grpc_request",
    "join",
    "model_inputs",
    "piece_from_grpc",
    "piece_from_json",
    "pieces_of",
    "request_fields",
    "sse_events",
    "stream_error",
    "with_lora",
]
