"""The default zoo, built for the local target, served by the real tritonserver."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from builder.python_models.image_preprocess.model import preprocess_image
from builder.server import TritonServer
from builder.spec import load_spec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
EVAL_IMAGES = sorted((ROOT / "calibration" / "resnet18" / "eval").glob("*.jpg"))


@pytest.fixture(scope="module")
def client(triton: TritonServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(triton.grpc_url)


def in_process(repo: Path, model: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(repo / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def infer(
    client: grpcclient.InferenceServerClient, model: str, feeds: dict[str, np.ndarray], outputs: list[str]
):
    inputs = []
    for name, array in feeds.items():
        dtype = "BYTES" if array.dtype == np.object_ else grpcclient.np_to_triton_dtype(array.dtype)
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def test_every_model_of_the_spec_is_ready(client: grpcclient.InferenceServerClient) -> None:
    spec = load_spec(ROOT / "models.yaml")
    for model in spec.all_models():
        assert client.is_model_ready(model.name), model.name


def test_simple_adds_and_subtracts(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    out0, out1 = infer(client, "simple", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def test_every_published_resnet18_variant_matches_in_process_onnxruntime(
    client: grpcclient.InferenceServerClient, zoo_repo: Path
) -> None:
    pixels = np.stack([preprocess_image(p.read_bytes()) for p in EVAL_IMAGES[:4]])
    published = json.loads((zoo_repo / "manifest.json").read_text())["models"]["resnet18"]["published"]
    for name in published:
        (served,) = infer(client, name, {"input": pixels}, ["logits"])
        (local,) = in_process(zoo_repo, name, {"input": pixels})
        np.testing.assert_allclose(served, local, rtol=1e-4, atol=1e-4, err_msg=name)


def test_image_ensemble_equals_preprocess_then_resnet18(
    client: grpcclient.InferenceServerClient, zoo_repo: Path
) -> None:
    images = np.array([[p.read_bytes()] for p in EVAL_IMAGES[:3]], dtype=np.object_)
    (logits,) = infer(client, "resnet18_image", {"IMAGE": images}, ["LOGITS"])
    pixels = np.stack([preprocess_image(p.read_bytes()) for p in EVAL_IMAGES[:3]])
    (local,) = in_process(zoo_repo, "resnet18", {"input": pixels})
    np.testing.assert_allclose(logits, local, rtol=1e-4, atol=1e-4)


def test_classification_extension_returns_labelled_top_k(client: grpcclient.InferenceServerClient) -> None:
    image = np.array([[EVAL_IMAGES[0].read_bytes()]], dtype=np.object_)
    tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(image)
    result = client.infer(
        "resnet18_image", [tensor], outputs=[grpcclient.InferRequestedOutput("LOGITS", class_count=3)]
    )
    top = [entry.decode().split(":") for entry in result.as_numpy("LOGITS")[0]]
    assert len(top) == 3
    scores = [float(score) for score, _, _ in top]
    assert scores == sorted(scores, reverse=True)
    assert all(label == f"class_{int(index):03d}" for _, index, label in top)
