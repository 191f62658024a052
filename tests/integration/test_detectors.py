"""Object detectors end to end on the real server: a DETR checkpoint (``task: object-detection``)
and a YOLO-style ONNX file (``task: object-detection`` with a ``detection:`` block), both made here,
built with every precision and served from one tritonserver. The checkpoint answers as transformers'
``pipeline("object-detection")`` does on real photos of several sizes (same labels, boxes within a
pixel, scores within 1e-3), the YOLO-style graph as Ultralytics' published rules written out in
``fixtures/yolo_rules.py``; alone, at once (the dynamic batcher mixing sizes) and through the
detection client, sync and asyncio, gRPC and HTTP; every published variant keeps the reference's
boxes within its tolerance, and a variant that moves them is left out with the figure in its line."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from tritonclient.utils import InferenceServerException

from builder.pipeline import build
from builder.python_models.shared.detection import Found
from builder.records import BuildOptions
from builder.server import TritonServer
from builder.spec import load_spec
from builder.tasks.object_detection import BoxTolerance, match
from clients import AsyncDetector, Detector
from tests.builder.fixtures import detectors
from tests.integration.fixtures import yolo_rules

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTPUTS = ["BOXES", "SCORES", "LABELS", "CLASSES", "COUNT"]
PHOTOS = detectors.photos()
SIZE = (detectors.YOLO_SIZE, detectors.YOLO_SIZE)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("detectors")
    detectors.detr(root / "detr")
    detectors.yolo(root / "yolo.onnx")
    detectors.write_photos(root / "eval")
    calib = root / "calib"
    detectors.write_photos(calib)
    for photo in sorted((Path(__file__).parents[2] / "calibration" / "resnet18" / "calib").glob("*.jpg"))[:6]:
        (calib / photo.name).write_bytes(photo.read_bytes())
    common = {
        "task": "object-detection", "precisions": ["fp32", "fp16", "int8"], "evaluation": {"data": "eval"},
        # Their random heads' INT8 misses the box tolerance: two trials of the search, judged on boxes.
        "calibration": {"data": "calib", "search": {"max_trials": 2}},
        "targets": {"local": {"serve": "fp32"}},
    }  # fmt: skip
    models = [
        {"name": "detr", "source": "detr", **common},
        {"name": "yolo", "source": "yolo.onnx", **common, "detection": {"labels": detectors.YOLO_LABELS}},
    ]
    (root / "models.yaml").write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def built(project: Path) -> list[str]:
    lines: list[str] = []
    build(BuildOptions(project / "models.yaml", project / "repo", target="local", cache_dir=project / "cache",
                       log=lines.append))  # fmt: skip
    return lines


@pytest.fixture(scope="module")
def server(
    built: list[str], project: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    server = TritonServer(project / "repo", log_path=tmp_path_factory.mktemp("det-triton") / "server.log",
                          exit_timeout_s=5)  # fmt: skip
    server.start(timeout=300)  # the checkpoint's processor imports transformers (and torch) as it loads
    try:
        yield server
    finally:
        server.stop()


def grpc(server: TritonServer) -> Any:
    return grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))


def infer(
    server: TritonServer, model: str, images: list[bytes], threshold: float | None = None
) -> dict[str, Any]:
    data = np.array([[i] for i in images], dtype=object)
    tensor = grpcclient.InferInput("IMAGE", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    parameters = None if threshold is None else {"threshold": threshold}
    result = grpc(server).infer(model, [tensor], parameters=parameters)
    return {name: result.as_numpy(name) for name in OUTPUTS}


def rows(answer: dict[str, Any], i: int = 0) -> list[tuple[str, float, list[float]]]:
    count = int(answer["COUNT"][i][0])
    return [(answer["LABELS"][i][k].decode(), float(answer["SCORES"][i][k]), answer["BOXES"][i][k].tolist())
            for k in range(count)]  # fmt: skip


def test_the_checkpoint_answers_as_transformers_pipeline(server: TritonServer, project: Path) -> None:
    from PIL import Image
    from transformers import pipeline

    pipe = pipeline("object-detection", model=str(project / "detr"))
    compared = 0
    for name, data in PHOTOS.items():
        for threshold in (None, 0.3):
            served = rows(infer(server, "detr_pipeline", [data], threshold))
            kwargs = {} if threshold is None else {"threshold": threshold}
            expected = pipe(Image.open(io.BytesIO(data)), **kwargs)
            assert [label for label, _, _ in served] == [e["label"] for e in expected], name
            for (_, score, box), e in zip(served, expected, strict=True):
                assert score == pytest.approx(e["score"], abs=1e-3)
                want = [e["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")]  # the pipeline's are truncated
                assert np.abs(np.array(box) - np.array(want)).max() <= 1.0, (name, box, want)
            compared += len(served)
    assert compared > 20  # enough boxes for the comparison to bite


def test_the_yolo_graph_answers_as_the_published_rules(server: TritonServer, project: Path) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(project / "yolo.onnx"), providers=["CPUExecutionProvider"])
    compared = 0
    for name, data in PHOTOS.items():
        served = rows(infer(server, "yolo_pipeline", [data]))
        expected = yolo_rules.detect(session, data, SIZE)
        assert [label for label, _, _ in served] == [detectors.YOLO_LABELS[c] for _, _, c in expected], name
        for (_, score, box), (want, want_score, _) in zip(served, expected, strict=True):
            assert score == pytest.approx(want_score, abs=1e-3)
            assert np.abs(np.array(box) - np.array(want)).max() <= 1.0, (name, box, want)
        compared += len(served)
    assert compared > 20


@pytest.mark.parametrize("model", ["detr_pipeline", "yolo_pipeline"])
def test_requests_at_once_of_photos_of_every_size_each_get_their_own_boxes(
    server: TritonServer, model: str
) -> None:
    """Sent at once, the dynamic batcher hands the models several requests together: each still gets
    exactly the boxes it gets alone, however many (none included)."""
    items = list(PHOTOS.values()) * 3
    alone = {i: infer(server, model, [data]) for i, data in enumerate(items[: len(PHOTOS)])}
    done: list[Any] = [None] * len(items)
    finished = threading.Semaphore(0)
    client = grpc(server)

    def keep(i: int) -> Any:
        def callback(result: Any, error: Any) -> None:
            done[i] = error if error is not None else result
            finished.release()

        return callback

    for i, data in enumerate(items):
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[data]], dtype=object))
        client.async_infer(
            model, [tensor], keep(i), outputs=[grpcclient.InferRequestedOutput(o) for o in OUTPUTS]
        )
    for _ in items:
        assert finished.acquire(timeout=120)
    counts = set()
    for i, result in enumerate(done):
        assert not isinstance(result, Exception), result
        want = alone[i % len(PHOTOS)]
        for name in OUTPUTS:
            got = result.as_numpy(name)
            assert got.shape == want[name].shape, (i, name)
            if got.dtype == object:
                assert got.tolist() == want[name].tolist()
            else:
                np.testing.assert_allclose(got, want[name], atol=1e-4)
        counts.add(int(want["COUNT"][0][0]))
    assert len(counts) > 2  # answers of different lengths went out together


def test_a_request_of_several_photos_counts_each_ones_boxes(server: TritonServer) -> None:
    photos = [PHOTOS["china"], PHOTOS["coffee"], PHOTOS["flower_tall"]]
    together = infer(server, "yolo_pipeline", photos)
    for i, data in enumerate(photos):
        alone = infer(server, "yolo_pipeline", [data])
        n = int(alone["COUNT"][0][0])
        assert (
            together["COUNT"][i][0] == n and together["LABELS"][i][:n].tolist() == alone["LABELS"][0].tolist()
        )
        np.testing.assert_allclose(together["BOXES"][i][:n], alone["BOXES"][0], atol=1e-4)
        assert (together["SCORES"][i][n:] == 0).all()  # padding up to the request's largest count
    assert together["BOXES"].shape[1] == together["COUNT"].max()


def _variant_boxes(server: TritonServer, name: str, variant: str, data: bytes) -> Found:
    """The photo through the pipeline's own pre- and post-processing models around one published
    variant, each step a request of its own."""
    client = grpc(server)
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[data]], dtype=object))
    pre = client.infer(f"{name}_preprocess", [image])
    core_inputs = [i["name"] for i in client.get_model_metadata(variant, as_json=True)["inputs"]]
    feed = []
    for input_name in core_inputs:
        array = pre.as_numpy(input_name)
        tensor = grpcclient.InferInput(
            input_name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64"
        )
        tensor.set_data_from_numpy(array)
        feed.append(tensor)
    core = client.infer(variant, feed)
    post_feed = []
    for output in client.get_model_metadata(variant, as_json=True)["outputs"]:
        array = core.as_numpy(output["name"])
        tensor = grpcclient.InferInput(output["name"], list(array.shape), "FP32")
        tensor.set_data_from_numpy(array.astype(np.float32))
        post_feed.append(tensor)
    size = grpcclient.InferInput("image_size", [1, 2], "INT64")
    size.set_data_from_numpy(pre.as_numpy("image_size"))
    post = client.infer(f"{name}_postprocess", [*post_feed, size])
    n = int(post.as_numpy("COUNT")[0][0])
    boxes = post.as_numpy("BOXES")[0][:n]
    # A box clipped to nothing (the random network's boxes beyond the photo) has no overlap to measure.
    kept = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    return Found(boxes[kept], post.as_numpy("SCORES")[0][:n][kept], post.as_numpy("CLASSES")[0][:n][kept])


@pytest.mark.parametrize("name", ["detr", "yolo"])
def test_every_published_variant_serves_the_references_boxes_within_its_tolerance(
    server: TritonServer, project: Path, name: str
) -> None:
    manifest = json.loads((project / "repo" / "manifest.json").read_text())
    published = manifest["models"][name]["published"]
    assert len(published) >= 2
    model = load_spec(project / "models.yaml").model(name)
    assert model.detection is not None
    threshold = model.detection.default_threshold
    fp32 = next(variant for variant, label in published.items() if label == "fp32")
    reference = [_variant_boxes(server, name, fp32, data) for data in PHOTOS.values()]
    for variant, label in published.items():
        t = model.tolerances[label.split("_")[0]].detection  # type: ignore[index]
        assert t is not None
        tol = BoxTolerance(t.min_matched, t.iou, t.max_score_diff)
        got = [_variant_boxes(server, name, variant, data) for data in PHOTOS.values()]
        assert match(reference, got, threshold, tol).matched >= tol.min_matched, (variant, label)


def test_a_variant_that_moves_boxes_is_left_out_with_the_figure_in_its_line(
    built: list[str], project: Path
) -> None:
    manifest = json.loads((project / "repo" / "manifest.json").read_text())
    for name in ("detr", "yolo"):
        report = manifest["models"][name]["verification"]
        for label, result in report.items():
            figures = result["metrics"]["detections"]
            assert figures["boxes"] > 0 and figures["matched"] is not None
            if not result["passed"]:
                assert label not in manifest["models"][name]["published"].values()
                assert any(
                    f"variant {label} not published" in line and "detections matched" in line
                    for line in built
                )


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_detection_client_sync_and_asyncio(server: TritonServer, protocol: str) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    photos = [PHOTOS["china"], PHOTOS["flower_tall"], PHOTOS["coffee"]]
    raw = [rows(infer(server, "yolo_pipeline", [p])) for p in photos]
    with Detector(url, "yolo_pipeline", protocol=protocol) as detector:
        found = detector.detect(photos)
        assert [[(d.label, d.score) for d in f] for f in found] == [
            [(r[0], pytest.approx(r[1])) for r in rr] for rr in raw
        ]
        assert all(
            d.box == pytest.approx(r[2])
            for f, rr in zip(found, raw, strict=True)
            for d, r in zip(f, rr, strict=True)
        )
        high = detector.detect(photos[0], threshold=0.6)[0]
        assert all(d.score > 0.6 for d in high) and len(high) < len(found[0])

    async def detect() -> list[Any]:
        async with AsyncDetector(url, "detr_pipeline", protocol=protocol) as detector:
            return await detector.detect(photos)

    found = asyncio.run(detect())
    assert [[d.label for d in f] for f in found] == [[r[0] for r in rows(infer(server, "detr_pipeline", [p]))]
                                                     for p in photos]  # fmt: skip


def test_the_example_draws_the_boxes_on_the_photo(server: TritonServer, tmp_path: Path) -> None:
    import runpy

    from PIL import Image

    photo = tmp_path / "china.jpg"
    photo.write_bytes(PHOTOS["china"])
    example = Path(__file__).parents[2] / "clients" / "examples" / "draw_boxes.py"
    main = runpy.run_path(str(example))["main"]
    assert (
        main([str(photo), str(tmp_path / "boxes.png"), "--model", "yolo_pipeline", "--url", server.grpc_url])
        == 0
    )
    drawn, original = Image.open(tmp_path / "boxes.png"), Image.open(photo).convert("RGB")
    assert drawn.size == original.size
    assert (
        np.abs(np.asarray(drawn, np.int16) - np.asarray(original, np.int16)).max() > 100
    )  # coloured outlines


@pytest.mark.parametrize("model", ["detr_pipeline", "yolo_pipeline"])
def test_a_file_that_is_no_image_gets_one_line_and_the_server_keeps_serving(
    server: TritonServer, model: str
) -> None:
    for data, words in ((b"GIF89a no image here", "cannot decode image"), (b"", "the image is empty")):
        with pytest.raises(InferenceServerException, match=words) as caught:
            infer(server, model, [data])
        assert "\n" not in str(caught.value)
    with pytest.raises(InferenceServerException, match="request parameter 'threshold'"):
        infer(server, model, [PHOTOS["coffee"]], threshold=2.0)
    assert infer(server, model, [PHOTOS["coffee"]])["COUNT"].shape == (1, 1)
