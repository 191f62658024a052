"""Clients for a Triton server: `Client` (sync), `AsyncClient` (asyncio), task clients, typed errors.

Imports only tritonclient, numpy and the standard library (Pillow, optionally, for images).
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    InferenceTimeout,
    InvalidInput,
    InvalidResponse,
    ModelNotFound,
    ModelNotReady,
    RequestRejected,
    ServerUnavailable,
    SharedMemoryError,
    TritonClientError,
)
from .model import ModelInfo, TensorInfo
from .retry import NO_RETRY, RetryPolicy
from .settings import Settings
from .tasks import Classifier, Embedder, Prediction

__all__ = [
    "NO_RETRY",
    "AsyncClient",
    "Classifier",
    "Client",
    "Embedder",
    "InferenceTimeout",
    "InvalidInput",
    "InvalidResponse",
    "ModelInfo",
    "ModelNotFound",
    "ModelNotReady",
    "Prediction",
    "RequestRejected",
    "RetryPolicy",
    "ServerUnavailable",
    "Settings",
    "SharedMemoryError",
    "TensorInfo",
    "TritonClientError",
]
