"""The detection client's decisions, without a server: a response's rows read up to each image's
COUNT, the threshold sent as Triton's request parameter (and checked for the model's outputs as
declared: ragged dims accept any count), one request per image. Against the real server:
tests/integration/test_detectors.py."""

from __future__ import annotations

import numpy as np
import pytest

from clients import Detection, InvalidResponse
from clients.core import prepare
from clients.detection import _options, _requests, detections
from clients.model import ModelInfo, check_outputs
from clients.retry import Deadline
from clients.settings import Settings
from tests.clients._helpers import tensor

LOCAL = Settings("127.0.0.1:8001", "grpc")


def pipeline() -> ModelInfo:
    outputs = [tensor("BOXES", "FP32", [-1, -1, 4]), tensor("SCORES", "FP32", [-1, -1]),
               tensor("LABELS", "BYTES", [-1, -1]), tensor("CLASSES", "INT64", [-1, -1]),
               tensor("COUNT", "INT32", [-1, 1])]  # fmt: skip
    metadata = {"name": "det_pipeline", "versions": ["1"], "inputs": [tensor("IMAGE", "BYTES", [-1, 1])],
                "outputs": outputs}  # fmt: skip
    return ModelInfo.from_triton(metadata, {"name": "det_pipeline", "max_batch_size": 8})


def response(count: list[int], rows: int) -> dict[str, np.ndarray]:
    b = len(count)
    return {
        "BOXES": np.arange(b * rows * 4, dtype=np.float32).reshape(b, rows, 4),
        "SCORES": np.full((b, rows), 0.5, np.float32), "CLASSES": np.ones((b, rows), np.int64),
        "LABELS": np.full((b, rows), b"dog", dtype=object), "COUNT": np.array(count, np.int32).reshape(b, 1),
    }  # fmt: skip


def test_each_image_reads_its_own_count_of_rows() -> None:
    arrays = response([2, 0], rows=2)
    assert detections(arrays, 0) == [
        Detection("dog", 0.5, (0.0, 1.0, 2.0, 3.0), 1), Detection("dog", 0.5, (4.0, 5.0, 6.0, 7.0), 1),
    ]  # fmt: skip
    assert detections(arrays, 1) == []
    assert detections(response([0], rows=0)) == []
    with pytest.raises(InvalidResponse, match="COUNT says 3 boxes"):
        detections(response([3], rows=2))


def test_any_count_of_boxes_fits_the_declared_outputs() -> None:
    for rows in (0, 1, 57):
        check_outputs(pipeline(), response([rows], rows), 1)


def test_the_threshold_is_a_request_parameter_and_each_image_a_request() -> None:
    info = pipeline()
    requests = _requests(info, [b"a", b"b", b"c"])
    assert len(requests) == 3 and requests[0]["IMAGE"].shape == (1, 1)
    assert len(_requests(info, b"one")) == 1
    call = prepare(LOCAL, info, requests[0], None, Deadline(None), _options(0.7, None))  # type: ignore[arg-type]
    assert call.arguments() == {"parameters": {"threshold": 0.7}}
    plain = prepare(LOCAL, info, requests[0], None, Deadline(None), _options(None, None))  # type: ignore[arg-type]
    assert plain.arguments() == {}
