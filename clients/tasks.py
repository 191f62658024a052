"""Task clients: text embeddings (`minilm_embed`), reranking (a `text-ranking` checkpoint's
`<name>_pipeline`) and image classification (`efficientnet_lite0_image`).

They find their tensor names in the model's metadata, so they follow the repository, not a copy.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
from numpy.typing import NDArray

from .client import Client
from .errors import InvalidInput
from .model import ModelInfo, TensorInfo
from .settings import Options

if TYPE_CHECKING:
    from typing import Unpack


def _only(tensors: dict[str, TensorInfo], what: str, info: ModelInfo) -> TensorInfo:
    if len(tensors) != 1:
        raise InvalidInput(f"model '{info.name}' must have exactly one {what}, has {', '.join(tensors)}")
    return next(iter(tensors.values()))


def _strings(items: list[bytes], spec: TensorInfo) -> NDArray[Any]:
    """A BYTES batch shaped [N, 1, ...] (or [N]) as the input's metadata says."""
    return np.array(items, dtype=object).reshape(len(items), *(1 for _ in spec.shape[1:]))


class Embedder:
    """`Embedder(url).embed(["a text", ...])` -> float32 array [N, dim] (unit vectors for MiniLM)."""

    def __init__(
        self, url: str, model: str = "minilm_embed", protocol: str | None = None, **options: Unpack[Options]
    ) -> None:
        self.client, self.model = Client(url, protocol, **options), model

    def embed(self, texts: Sequence[str] | str, timeout: float | None = None) -> NDArray[np.float32]:
        info = self.client.model(self.model)
        spec, out = _only(info.inputs, "input", info), _only(info.outputs, "output", info)
        items = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            return np.zeros((0, out.shape[-1]), dtype=np.float32)
        data = _strings([t.encode("utf-8") for t in items], spec)
        result = self.client.infer(self.model, {spec.name: data}, timeout=timeout)[out.name]
        return result.reshape(len(items), -1).astype(np.float32, copy=False)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Ranked:
    """One document of a reranking: its place in the documents given, its score, the document."""

    index: int
    score: float
    document: str


class Reranker:
    """`Reranker(url, "ranker_pipeline").rerank("a query", ["a passage", ...], top_n=3)` -> Ranked,
    best first (a cross-encoder's relevance, as sentence-transformers' `CrossEncoder.rank` orders it);
    `.score([(query, passage), ...])` -> float32 [N], each pair's score in order.

    The model takes two texts per item (the query's input first, the document's second, in the
    metadata's order) and answers one FP32 score per item; pairs beyond its max_batch_size go as
    concurrent requests, as `Client.infer` splits them."""

    def __init__(self, url: str, model: str, protocol: str | None = None, **options: Unpack[Options]) -> None:
        self.client, self.model = Client(url, protocol, **options), model

    def score(self, pairs: Sequence[tuple[str, str]], timeout: float | None = None) -> NDArray[np.float32]:
        info = self.client.model(self.model)
        texts = [t for t in info.inputs.values() if t.datatype == "BYTES"]
        if len(texts) != 2 or len(info.inputs) != 2:
            raise InvalidInput(f"model '{info.name}' must take two texts per item (a query and a document)")
        scores = _only({n: t for n, t in info.outputs.items() if t.datatype == "FP32"}, "FP32 output", info)
        if not pairs:
            return np.zeros((0,), dtype=np.float32)
        # Sent shortest first, so that each request of the split batch pads its pairs to a like length.
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        data = {
            spec.name: _strings([pairs[i][column].encode("utf-8") for i in order], spec)
            for column, spec in enumerate(texts)
        }
        result = self.client.infer(self.model, data, [scores.name], timeout=timeout)[scores.name]
        out = np.empty(len(pairs), dtype=np.float32)
        out[order] = result.reshape(len(pairs))
        return out

    def rerank(
        self, query: str, documents: Sequence[str], top_n: int | None = None, timeout: float | None = None
    ) -> list[Ranked]:
        scores = self.score([(query, d) for d in documents], timeout=timeout)
        order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))  # stable: ties keep order
        return [Ranked(i, float(scores[i]), documents[i]) for i in order[:top_n]]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Prediction:
    label: str
    score: float
    index: int


Image: TypeAlias = "bytes | str | PathLike[str] | NDArray[Any] | Any"  # Any: a PIL.Image.Image


def image_bytes(image: Image) -> bytes:
    """Encoded image bytes: bytes as they are, a path's content, arrays and PIL images as PNG."""
    if isinstance(image, bytes):
        return image
    if isinstance(image, (str, PathLike)):
        return Path(image).read_bytes()
    try:
        from PIL import Image as PILImage  # optional: only to encode arrays and PIL images
    except ImportError as exc:
        raise ImportError(
            "encoding image arrays needs Pillow: pip install 'tritonforge-client[images]', or pass bytes"
        ) from exc

    picture = PILImage.fromarray(image) if isinstance(image, np.ndarray) else image
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def parse_class(entry: bytes) -> Prediction:
    """Triton's classification entry `score:index[:label]`."""
    parts = entry.decode("utf-8").split(":", 2)
    index = int(parts[1])
    return Prediction(parts[2] if len(parts) > 2 else str(index), float(parts[0]), index)


class Classifier:
    """`Classifier(url).classify(["cat.jpg", ...], top_k=5)` -> one list of Predictions per image,
    best first, using Triton's classification extension (labels come from the model's label file)."""

    def __init__(
        self,
        url: str,
        model: str = "efficientnet_lite0_image",
        protocol: str | None = None,
        **options: Unpack[Options],
    ) -> None:
        self.client, self.model = Client(url, protocol, **options), model

    def classify(
        self, images: Sequence[Image] | Image, top_k: int = 5, timeout: float | None = None
    ) -> list[list[Prediction]]:
        info = self.client.model(self.model)
        spec, out = _only(info.inputs, "input", info), _only(info.outputs, "output", info)
        single = isinstance(images, (bytes, str, PathLike, np.ndarray)) or not isinstance(images, Sequence)
        items: list[Any] = [images] if single else list(cast(Sequence[Any], images))
        if not items:
            return []
        data = _strings([image_bytes(i) for i in items], spec)
        result = self.client.infer(self.model, {spec.name: data}, timeout=timeout, class_count=top_k)
        rows = result[out.name].reshape(len(items), -1)
        return [[parse_class(e) for e in row] for row in rows]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Classifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
