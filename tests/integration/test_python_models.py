"""The Python-backend models served by a real tritonserver, on a repository built in tmp_path."""

from __future__ import annotations

import functools
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import ensemble_config, write_config
from builder.python_models import copy_sources, model_sources, package
from builder.python_models.image_preprocess.model import MEAN, STD, preprocess_image
from builder.server import TritonServer
from builder.spec import Precision, Spec
from builder.targets import get
from tests.triton_stats import model_stats, rows_executed, settled

RUNNER = package("onnx_runner")  # each model's package lands whole in its version folder
PREPROCESS = package("image_preprocess")
TABLE = np.arange(10, dtype=np.float32) * 1.5
LABELS = [f"class_{i}" for i in range(10)]
SLOW_QUEUE = {"max_queue_delay_us": 200_000}  # long enough that concurrent requests always meet


def tensor(name: str, dtype: str, dims: list[int], **extra: Any) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "dims": dims, **extra}


def core(
    name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "name": name, "source": f"{name}.onnx", "inputs": inputs, "outputs": outputs,
        "evaluation": {"data": "eval.npz"}, "tolerances": {"fp32": {"max_abs": 0.0}},
        "serve": {"threads": 1}, **extra,
    }  # fmt: skip


SPEC = Spec.model_validate(
    {
        "models": [
            core(
                "add",
                [tensor("A", "FP32", [-1]), tensor("B", "FP32", [-1])],
                [tensor("SUM", "FP32", [-1])],
                max_batch_size=16,
                batching=SLOW_QUEUE,
                profiles=[{"shapes": {n: {"min": [1], "opt": [4], "max": [64]} for n in "AB"}}],
                warmup={"batch_sizes": [1, 4]},
            ),
            core(
                "lookup",
                [tensor("IDX", "INT64", [1])],
                [tensor("OUT", "FP32", [1])],
                max_batch_size=16,
                batching=SLOW_QUEUE,
            ),
            core("half", [tensor("X", "FP32", [4])], [tensor("Y", "FP32", [4])], max_batch_size=8),
            core(
                "classifier",
                [tensor("input", "FP32", [3, 224, 224])],
                [tensor("logits", "FP32", [10], labels="labels.txt")],
                max_batch_size=4,
            ),
        ],
        "python_models": [
            {
                "name": "image_preprocess",
                "path": "builder/python_models/image_preprocess",
                "inputs": [tensor("IMAGE", "STRING", [1])],
                "outputs": [tensor("PIXELS", "FP32", [3, 224, 224])],
                "max_batch_size": 4,
                "batching": {"enabled": True},
            }
        ],
        "ensembles": [
            {
                "name": "classify_image",
                "max_batch_size": 4,
                "inputs": [tensor("IMAGE", "STRING", [1])],
                "outputs": [tensor("LOGITS", "FP32", [10], labels="labels.txt")],
                "steps": [
                    {"model": "image_preprocess", "inputs": {"IMAGE": "IMAGE"}, "outputs": {"PIXELS": "px"}},
                    {"model": "classifier", "inputs": {"input": "px"}, "outputs": {"logits": "LOGITS"}},
                ],
            }
        ],
    }
)


def graph_model(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = ()
) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def value(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def onnx_models() -> dict[str, onnx.ModelProto]:
    f32, f16 = TensorProto.FLOAT, TensorProto.FLOAT16
    weights = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    return {
        "add": graph_model(
            [helper.make_node("Add", ["A", "B"], ["SUM"])],
            [value("A", f32, ["N", "L"]), value("B", f32, ["N", "L"])],
            [value("SUM", f32, ["N", "L"])],
        ),
        # Gather fails at run time for an index outside the table: a per-request error.
        "lookup": graph_model(
            [helper.make_node("Gather", ["table", "IDX"], ["OUT"], axis=0)],
            [value("IDX", TensorProto.INT64, ["N", 1])],
            [value("OUT", f32, ["N", 1])],
            [numpy_helper.from_array(TABLE, "table")],
        ),
        # An fp16 variant with fp16 inputs and outputs behind an FP32 config.
        "half": graph_model(
            [helper.make_node("Mul", ["X", "three"], ["Y"])],
            [value("X", f16, ["N", 4])],
            [value("Y", f16, ["N", 4])],
            [numpy_helper.from_array(np.array(3, np.float16), "three")],
        ),
        "classifier": graph_model(
            [
                helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
                helper.make_node("Flatten", ["pooled"], ["flat"]),
                helper.make_node("MatMul", ["flat", "w"], ["logits"]),
            ],
            [value("input", f32, ["N", 3, 224, 224])],
            [value("logits", f32, ["N", 10])],
            [numpy_helper.from_array(weights, "w")],
        ),
    }


def place(repo: Path, cfg: ModelConfig, model: Path, extra: dict[str, bytes] | None = None) -> Path:
    folder = repo / cfg.name
    write_config(cfg, folder)
    (folder / "1").mkdir()
    copy_sources(model_sources(model), folder / "1")
    for name, data in (extra or {}).items():
        (folder / "1" / name).write_bytes(data)
    return folder


def build_repo(repo: Path) -> Path:
    labels = ("\n".join(LABELS) + "\n").encode()
    for model in SPEC.models:
        variant = Precision.FP16 if model.name == "half" else Precision.FP32
        cfg = get("local").core_config(model, model.name, variant)
        folder = place(repo, cfg, RUNNER, {"model.onnx": onnx_models()[model.name].SerializeToString()})
        if model.name == "classifier":
            (folder / "labels.txt").write_bytes(labels)
    for pm in SPEC.python_models:
        place(repo, get("cpu").python_model(pm).config, PREPROCESS)
    for ens in SPEC.ensembles:
        folder = repo / ens.name
        write_config(ensemble_config(ens, SPEC), folder)
        (folder / "1").mkdir()
        (folder / "labels.txt").write_bytes(labels)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("python_models")
    with TritonServer(build_repo(root / "repo"), log_path=root / "server.log") as srv:
        yield srv


@pytest.fixture()
def client(server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


def infer_input(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    inp = grpcclient.InferInput(name, list(array.shape), dtype)
    inp.set_data_from_numpy(array)
    return inp


def concurrent(client: grpcclient.InferenceServerClient, model: str, requests: list[list[Any]]) -> list[Any]:
    """Send every request at once; return each result or the error it got, in order."""
    results: list[Any] = [None] * len(requests)
    done = threading.Semaphore(0)

    def callback(i: int, result: Any, error: Any) -> None:
        results[i] = error if error is not None else result
        done.release()

    for i, inputs in enumerate(requests):
        client.async_infer(model, inputs, functools.partial(callback, i))
    for _ in requests:
        assert done.acquire(timeout=30)
    return results


def counts(stats: dict[str, Any]) -> tuple[int, int]:
    """(inferences, execute calls) of a model's statistics."""
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def png(rgb: tuple[int, int, int], size: tuple[int, int], fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format=fmt)
    return buf.getvalue()


def image_input(images: list[bytes]) -> grpcclient.InferInput:
    return infer_input("IMAGE", np.array(images, dtype=np.object_).reshape(-1, 1), "BYTES")


@pytest.mark.integration
def test_concurrent_requests_are_batched_and_match_ort(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(1)
    arrays = []
    # All in flight together. Triton's batcher only joins requests of equal non-batch shape that
    # queue back to back, so the lengths come in two runs; batch sizes vary within each.
    for i in range(24):
        shape = (1 + i % 3, 3 if i < 16 else 5)
        arrays.append(
            (rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32))
        )
    before = model_stats(client, "add")
    results = concurrent(
        client, "add", [[infer_input("A", a, "FP32"), infer_input("B", b, "FP32")] for a, b in arrays]
    )
    session = ort.InferenceSession(
        onnx_models()["add"].SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for (a, b), result in zip(arrays, results, strict=True):
        assert not isinstance(result, Exception), result
        out = result.as_numpy("SUM")
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, session.run(None, {"A": a, "B": b})[0])
    after = counts(settled(client, "add", rows_executed(before) + sum(a.shape[0] for a, _ in arrays)))
    requests, executions = after[0] - counts(before)[0], after[1] - counts(before)[1]
    assert requests == sum(a.shape[0] for a, _ in arrays)
    assert executions <= 8, f"{len(arrays)} requests took {executions} executions"


@pytest.mark.integration
def test_a_failing_request_fails_alone(client: grpcclient.InferenceServerClient) -> None:
    indices = [3, 99, 0, 9, 7]  # 99 is outside the table; all five share one batch
    requests = [[infer_input("IDX", np.array([[i]], np.int64), "INT64")] for i in indices]
    before = model_stats(client, "lookup")
    results = concurrent(client, "lookup", requests)
    after = settled(client, "lookup", rows_executed(before) + len(indices))
    executions = counts(after)[1] - counts(before)[1]
    assert executions < len(indices), "the bad request must have shared a batch with good ones"
    for index, result in zip(indices, results, strict=True):
        if index == 99:
            assert isinstance(result, Exception)
            assert "onnxruntime" in str(result) and "out of" in str(result).lower()
        else:
            assert not isinstance(result, Exception), result
            assert result.as_numpy("OUT").tolist() == [[TABLE[index]]]


@pytest.mark.integration
def test_inputs_and_outputs_are_cast_between_config_and_graph(
    client: grpcclient.InferenceServerClient,
) -> None:
    x = np.array([[0.5, 1.0, -2.0, 1e-3], [4.0, 8.0, 16.0, 0.0]], np.float32)
    out = client.infer("half", [infer_input("X", x, "FP32")]).as_numpy("Y")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, (x.astype(np.float16) * np.float16(3)).astype(np.float32))
    config = client.get_model_config("half", as_json=True)["config"]
    assert config["parameters"]["precision"]["string_value"] == "fp16"


@pytest.mark.integration
def test_image_preprocess_png_and_jpeg(client: grpcclient.InferenceServerClient) -> None:
    red_png = png((255, 0, 0), (320, 240))
    photo = io.BytesIO()
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (300, 500, 3), np.uint8)).save(photo, "JPEG")
    images = [red_png, photo.getvalue()]
    pixels = client.infer("image_preprocess", [image_input(images)]).as_numpy("PIXELS")
    assert pixels.shape == (2, 3, 224, 224) and pixels.dtype == np.float32
    np.testing.assert_allclose(pixels[1], preprocess_image(images[1]), atol=1e-6)
    expected = (np.array([1.0, 0.0, 0.0], np.float32) - MEAN) / STD
    np.testing.assert_allclose(pixels[0].mean(axis=(1, 2)), expected, atol=1e-5)


@pytest.mark.integration
def test_malformed_image_gets_an_error_and_the_server_stays_up(
    server: TritonServer, client: grpcclient.InferenceServerClient
) -> None:
    good = [image_input([png((0, 255, 0), (256, 256))])]
    results = concurrent(client, "image_preprocess", [good, [image_input([b"not an image"])], good])
    assert isinstance(results[1], Exception) and "cannot decode image" in str(results[1])
    assert not isinstance(results[0], Exception) and not isinstance(results[2], Exception)
    assert server.is_ready() and client.is_model_ready("image_preprocess")
    assert client.infer("image_preprocess", good).as_numpy("PIXELS").shape == (1, 3, 224, 224)


@pytest.mark.integration
def test_ensemble_classifies_image_bytes_with_labels(client: grpcclient.InferenceServerClient) -> None:
    image = png((10, 200, 30), (400, 300), "JPEG")
    out = grpcclient.InferRequestedOutput("LOGITS", class_count=3)
    top = client.infer("classify_image", [image_input([image])], outputs=[out]).as_numpy("LOGITS")
    session = ort.InferenceSession(
        onnx_models()["classifier"].SerializeToString(), providers=["CPUExecutionProvider"]
    )
    logits = session.run(None, {"input": preprocess_image(image)[None]})[0][0]
    best = [int(i) for i in np.argsort(-logits)[:3]]
    got = [entry.decode().split(":") for entry in top.reshape(-1)]
    assert [int(index) for _, index, _ in got] == best
    assert [label for _, _, label in got] == [LABELS[i] for i in best]
    np.testing.assert_allclose([float(score) for score, _, _ in got], logits[best], rtol=1e-4)


def test_preprocess_image_outside_triton() -> None:
    gray = io.BytesIO()
    Image.new("L", (200, 900), 128).save(gray, "PNG")
    out = preprocess_image(gray.getvalue())
    assert out.shape == (3, 224, 224) and out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out[:, 100, 100], (128 / 255 - MEAN) / STD, atol=1e-5)
    rgba = io.BytesIO()
    Image.new("RGBA", (224, 224), (0, 0, 255, 0)).save(rgba, "PNG")
    np.testing.assert_allclose(preprocess_image(rgba.getvalue())[:, 0, 0], (np.array([0, 0, 1]) - MEAN) / STD)
    with pytest.raises(Exception, match="cannot identify"):
        preprocess_image(b"\x89PNG garbage")
