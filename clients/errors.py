"""Typed errors, and the translation of tritonclient / transport errors into them.

Each error keeps Triton's own message (and the original exception as ``__cause__``); ``retryable``
says whether the same request may succeed if sent again.
"""

from __future__ import annotations

import asyncio

from .vllm_engine_contract import REFUSED


class TritonClientError(Exception):
    """Base class of every error the clients raise."""

    retryable = False


class ServerUnavailable(TritonClientError):
    """The server cannot be reached (refused, reset, not started, shutting down)."""

    retryable = True


class ModelNotReady(TritonClientError):
    """The model exists but is not ready (loading, unloading)."""

    retryable = True


class ModelNotFound(TritonClientError):
    """The server does not know the model (or version)."""


class InvalidInput(TritonClientError):
    """The request does not match the model's inputs (name, dtype, shape); never retried."""


class RequestRejected(TritonClientError):
    """The server refused the request for now: queue full, or the queue policy timed it out."""

    retryable = True


class InferenceTimeout(TritonClientError):
    """The request did not complete within its time budget."""


class InvalidResponse(TritonClientError):
    """The server answered with outputs that do not match the model's declared shapes."""


class SharedMemoryError(TritonClientError):
    """A system shared-memory region could not be created, registered or read."""


_REJECTED = ("exceeds maximum queue size", "request timeout expired", "rate limit", REFUSED)
_UNAVAILABLE = (
    "failed to connect",
    "connection refused",
    "socket closed",
    "connection reset",
    "server is not ready",
    "server not ready",
    "shutting down",
    "broken pipe",
)


def _status(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return str(status() if callable(status) else status or "")


def _by_message(message: str, status: str) -> type[TritonClientError]:
    text = message.lower()
    if any(s in text for s in _REJECTED):
        return RequestRejected
    if "unknown model" in text and "not found" in text:
        return ModelNotFound
    if ("not ready" in text and "model" in text) or "unknown model" in text:
        return ModelNotReady
    if any(s in text for s in _UNAVAILABLE):
        return ServerUnavailable
    if "DEADLINE_EXCEEDED" in status or "deadline exceeded" in text:
        return InferenceTimeout
    if status in ("StatusCode.INVALID_ARGUMENT", "400") or "unexpected inference input" in text:
        return InvalidInput
    if status in ("StatusCode.NOT_FOUND", "404"):
        return ModelNotFound
    if status in ("StatusCode.UNAVAILABLE", "503"):
        return ServerUnavailable
    return TritonClientError


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, OSError)):
        return True
    # aiohttp and geventhttpclient raise their own connection errors; match without importing them.
    name = type(exc).__name__
    return any(s in name for s in ("Connection", "Disconnected", "ClientOSError"))


def translate(exc: BaseException) -> TritonClientError:
    """The typed error for an exception raised by tritonclient or its transport."""
    if isinstance(exc, TritonClientError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or type(exc).__name__ == "Timeout":
        return InferenceTimeout(str(exc) or "request timed out")
    message = exc.message() if callable(getattr(exc, "message", None)) else str(exc)  # type: ignore[attr-defined]
    status = _status(exc)
    if not status and _is_connection_error(exc):
        return ServerUnavailable(message or type(exc).__name__)
    return _by_message(message or "", status)(message)
