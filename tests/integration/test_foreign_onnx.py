"""ONNX files written by other exporters, given as nothing but ``name`` and ``source`` (plus data for
int8), build, serve on the real tritonserver and answer as ONNX Runtime does in process: an opset-11
conv graph with a ``dim_value: -1`` batch, a rank-0 INT64 input, names with ``/`` and ``.``, a batch
on axis 1, onnxruntime's own mul_1.onnx (opset 7, fixed shape) as the package ships it, and a
MiniLM-shaped encoder whose weights are int8 already (served as it comes, not quantized again)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import onnxruntime.datasets
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from numpy.typing import NDArray

from builder.pipeline import build
from builder.records import BuildOptions
from builder.server import TritonServer
from tests.builder.fixtures import foreign_onnx as f
from tests.builder.fixtures.variants import passed_on_onnxruntime

pytestmark = pytest.mark.integration

Feed = dict[str, NDArray[np.generic]]
MUL_1 = str(onnxruntime.datasets.get_example("mul_1.onnx"))


def _project(tmp_path: Path) -> Path:
    f.save(f.conv_graph(11), tmp_path / "conv11.onnx")
    f.save(f.scalar_input_graph(), tmp_path / "scalar.onnx")
    f.save(f.slashed_names_graph(), tmp_path / "names.onnx")
    f.save(f.batch_on_axis_1_graph(), tmp_path / "cell.onnx")
    f.save(f.weight_only_int8_graph(), tmp_path / "minilm_int8.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    int8 = {"precisions": ["fp32", "int8"], "calibration": {"data": "cal.npz"}}
    models = [
        {"name": "conv11", "source": "conv11.onnx", **int8},
        {"name": "scalar", "source": "scalar.onnx"},
        {"name": "names", "source": "names.onnx"},
        {"name": "cell", "source": "cell.onnx"},
        {"name": "mul_1", "source": MUL_1, "precisions": ["fp32", "fp16"]},
        {"name": "int8w", "source": "minilm_int8.onnx", "precisions": ["fp32", "fp16", "int8_dynamic"]},
    ]  # fmt: skip
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return tmp_path


def _in_process(path: Path, feed: Feed) -> list[NDArray[np.generic]]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in sess.run(None, feed)]


def _http(server: TritonServer, model: str, feed: Feed, outputs: list[str]) -> list[NDArray[np.generic]]:
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    inputs = []
    for name, array in feed.items():
        sent = array.reshape(1) if array.ndim == 0 else array  # Triton's requests carry no rank 0
        tensor = httpclient.InferInput(name, list(sent.shape), "INT64" if sent.dtype == np.int64 else "FP32")
        tensor.set_data_from_numpy(sent)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def _grpc(server: TritonServer, model: str, feed: Feed, outputs: list[str]) -> list[NDArray[np.generic]]:
    client = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    inputs = []
    for name, array in feed.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def test_foreign_graphs_build_from_name_and_source_and_serve_as_onnx_runtime_answers(tmp_path: Path) -> None:
    project = _project(tmp_path)
    lines: list[str] = []
    repo = project / "model_repository"
    result = build(BuildOptions(project / "models.yaml", repo, target="local", log=lines.append))
    assert passed_on_onnxruntime(result) == {
        "conv11": ["fp32", "int8"], "scalar": ["fp32"], "names": ["fp32"], "cell": ["fp32"],
        "mul_1": ["fp32", "fp16"], "int8w": ["fp32"],
    }  # fmt: skip
    assert any("[conv11] variant int8: opset 11 converted to 13" in line for line in lines)
    quantized = "the graph is already quantized (2 int8 weights through Cast)"
    for variant in ("fp16", "int8_dynamic"):  # the int8 weights are served as they come
        (line,) = [x for x in lines if x.startswith(f"[int8w] variant {variant} not published: ")]
        assert quantized in line
    rng = np.random.default_rng(1)
    x_img = rng.standard_normal((2, 3, 24, 40)).astype(np.float32)  # not the profile's opt shape
    x_sig = rng.standard_normal((3, 16)).astype(np.float32)
    ids, mask = rng.integers(0, 100, (3, 9)).astype(np.int64), np.ones((3, 9), np.int64)
    mask[2, 5:] = 0
    feeds: dict[str, tuple[Path, Feed, list[str]]] = {
        "conv11": (project / "conv11.onnx", {"x": x_img}, ["save_infer_model/scale_0.tmp_1"]),
        "scalar": (project / "scalar.onnx", {"x": x_sig, "sr": np.array(8000, dtype=np.int64)}, ["y"]),
        "names": (project / "names.onnx", {"input/ids.0": x_sig[:, :8].copy()}, ["/model/out.1"]),
        "cell": (
            project / "cell.onnx",
            {"x": x_sig[:, :4].copy(), "state": rng.standard_normal((2, 3, 4)).astype(np.float32)},
            ["stateN"],
        ),
        "mul_1": (Path(MUL_1), {"X": x_sig[:3, :2].copy()}, ["Y"]),
        "int8w": (project / "minilm_int8.onnx", {"input_ids": ids, "attention_mask": mask}, ["embedding"]),
    }
    with TritonServer(repo) as server:
        for model, (path, feed, outputs) in feeds.items():
            want = _in_process(path, feed)
            served = _http(server, model, feed, outputs)
            for w, s in zip(want, served, strict=True):
                np.testing.assert_allclose(s, w, rtol=1e-5, atol=1e-5, err_msg=model)
        got = _grpc(server, "names", feeds["names"][1], ["/model/out.1"])
        np.testing.assert_allclose(got[0], _in_process(*feeds["names"][:2])[0], rtol=1e-5, atol=1e-5)
