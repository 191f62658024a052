"""The object-detection task client: `Detector` (sync) and `AsyncDetector` (asyncio) send each
image as a request of its own to a detector's pipeline (`<name>_pipeline`: image bytes in, boxes
out) and return typed detections per image.

A request of one image gets exactly its boxes: each image's answer has its own length (the
outputs' dims are [-1, ...] beyond the batch, Triton's way of ragged answers), and the server's
dynamic batcher still batches the requests. The names are the detectors' contract
(`detection_contract.py`, which the server's models link to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .aio import AsyncClient
from .client import Client
from .detection_contract import BOXES, CLASSES, COUNT, LABELS, OUTPUTS, SCORES, THRESHOLD
from .errors import InvalidResponse
from .model import Arrays, ModelInfo
from .settings import Options
from .tasks import Image, _only, _strings, image_bytes

if TYPE_CHECKING:
    from typing import Unpack


@dataclass(frozen=True)
class Detection:
    """One box: its class name and id, its score, and its corners in the original image's pixels
    (upright, as its EXIF orientation shows it)."""

    label: str
    score: float
    box: tuple[float, float, float, float]  # xmin, ymin, xmax, ymax
    class_id: int


def detections(arrays: Arrays, row: int = 0) -> list[Detection]:
    """The detections of one image of a response (its COUNT of the rows)."""
    count = int(np.asarray(arrays[COUNT]).reshape(-1)[row])
    boxes, scores = np.asarray(arrays[BOXES])[row], np.asarray(arrays[SCORES])[row]
    labels, classes = np.asarray(arrays[LABELS])[row], np.asarray(arrays[CLASSES])[row]
    if count > len(scores):
        raise InvalidResponse(f"{COUNT} says {count} boxes, the response holds {len(scores)}")
    return [
        Detection(
            _text(labels[i]), float(scores[i]), cast(Any, tuple(float(v) for v in boxes[i])), int(classes[i])
        )
        for i in range(count)
    ]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _requests(info: ModelInfo, images: Sequence[Image] | Image) -> list[dict[str, Any]]:
    spec = _only(info.inputs, "input", info)
    single = isinstance(images, (bytes, str, PathLike, np.ndarray)) or not isinstance(images, Sequence)
    items: list[Any] = [images] if single else list(cast(Sequence[Any], images))
    return [{spec.name: _strings([image_bytes(item)], spec)} for item in items]


def _options(threshold: float | None, timeout: float | None) -> dict[str, Any]:
    options: dict[str, Any] = {"timeout": timeout}
    if threshold is not None:
        options["parameters"] = {THRESHOLD: float(threshold)}
    return options


class Detector:
    """`Detector(url, "detr_pipeline").detect(["street.jpg", ...], threshold=0.5)` -> one list of
    `Detection`s per image (bytes, paths, arrays or PIL images), in the model's order (best first
    for a YOLO-style graph, the pipeline's for a checkpoint). `threshold` is the request parameter
    the model reads (unset: the model's own). Images go out as one request each, `concurrency`
    (default 4) at a time."""

    def __init__(self, url: str, model: str, protocol: str | None = None, **options: Unpack[Options]) -> None:
        self.client, self.model = Client(url, protocol, **options), model

    def detect(
        self, images: Sequence[Image] | Image, threshold: float | None = None, timeout: float | None = None
    ) -> list[list[Detection]]:
        requests = _requests(self.client.model(self.model), images)
        if not requests:
            return []
        answers = self.client.infer_many(self.model, requests, OUTPUTS, **_options(threshold, timeout))
        return [detections(a) for a in answers]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Detector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncDetector:
    """The asyncio twin of `Detector`: `await AsyncDetector(url, model).detect(images)`."""

    def __init__(self, url: str, model: str, protocol: str | None = None, **options: Unpack[Options]) -> None:
        self.client, self.model = AsyncClient(url, protocol, **options), model

    async def detect(
        self, images: Sequence[Image] | Image, threshold: float | None = None, timeout: float | None = None
    ) -> list[list[Detection]]:
        requests = _requests(await self.client.model(self.model), images)
        if not requests:
            return []
        answers = await self.client.infer_many(self.model, requests, OUTPUTS, **_options(threshold, timeout))
        return [detections(a) for a in answers]

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> AsyncDetector:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
