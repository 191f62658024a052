"""Clients for a Triton server: `Client` (sync), `AsyncClient` (asyncio), task clients, LLM
`Generator` / `AsyncGenerator`, typed errors.

Imports only tritonclient (with the grpcio, urllib3 and aiohttp it brings), numpy and the standard
library (Pillow, optionally, for images).
"""

from .aio import AsyncClient, AsyncSequence
from .client import Client, Sequence
from .detection import AsyncDetector, Detection, Detector
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
from .generator import AsyncGenerator, Generation, Generator
from .model import ModelInfo, TensorInfo
from .retry import NO_RETRY, RetryPolicy
from .settings import Settings
from .tasks import Classifier, Embedder, Prediction, Ranked, Reranker

__all__ = [
    "NO_RETRY",
    "AsyncClient",
    "AsyncDetector",
    "AsyncGenerator",
    "AsyncSequence",
    "Classifier",
    "Client",
    "Detection",
    "Detector",
    "Embedder",
    "Generation",
    "Generator",
    "InferenceTimeout",
    "InvalidInput",
    "InvalidResponse",
    "ModelInfo",
    "ModelNotFound",
    "ModelNotReady",
    "Prediction",
    "Ranked",
    "RequestRejected",
    "Reranker",
    "RetryPolicy",
    "Sequence",
    "ServerUnavailable",
    "Settings",
    "SharedMemoryError",
    "TensorInfo",
    "TritonClientError",
]
