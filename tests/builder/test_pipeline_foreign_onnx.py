"""Foreign ONNX files through the build: a variant that cannot be made is dropped with its reason
in one line while the rest is published; int8 below opset 13 converts the opset and says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from builder.errors import SpecError
from builder.failures import failure_line
from builder.pipeline import build
from builder.records import BATCH_INVARIANCE, BuildOptions
from builder.spec import ONNXRUNTIME
from tests.builder.fixtures import foreign_onnx as f
from tests.builder.fixtures.variants import passed_on_onnxruntime

pytestmark = pytest.mark.slow


def test_a_variant_that_cannot_be_made_is_dropped_and_the_rest_published(tmp_path: Path) -> None:
    f.save(f.conv_graph(12), tmp_path / "conv.onnx")
    f.save(f.scalar_input_graph(), tmp_path / "scalar.onnx")  # Mul and Div only: no dynamic INT8
    np.savez(
        tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
    )
    int8 = {"precisions": ["fp32", "int8"], "calibration": {"data": "cal.npz"}}
    models = [
        {"name": "conv", "source": "conv.onnx", **int8},
        {"name": "scalar", "source": "scalar.onnx", "precisions": ["fp32", "int8_dynamic"]},
    ]  # fmt: skip
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    lines: list[str] = []
    result = build(
        BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lines.append)
    )
    assert result.published
    assert passed_on_onnxruntime(result) == {
        "conv": ["fp32", "int8"], "scalar": ["fp32"],
    }  # fmt: skip
    assert "[conv] variant int8: opset 12 converted to 13 for per-channel Q/DQ" in lines
    manifest = json.loads((tmp_path / "repo" / "manifest.json").read_text())
    assert (
        manifest["models"]["conv"]["stages"]["int8"]["note"]
        == "opset 12 converted to 13 for per-channel Q/DQ"
    )
    assert "note" not in manifest["models"]["conv"]["stages"]["check"]
    (dropped,) = [line for line in lines if line.startswith("[scalar] variant int8_dynamic not published: ")]
    assert "int8_dynamic stage failed: ModelRefused" in dropped
    said, log = dropped.removesuffix(")").split(" (traceback in ")
    assert str(tmp_path) not in said and ".tmp-" not in said  # the log is named whole
    assert Path(log).name == "int8_dynamic.failure.log" and "Traceback" in Path(log).read_text()
    # Each model serves the variant measured fastest, which the machine's load decides; every other
    # ONNX Runtime variant that passed keeps a folder of its own.
    folders = sorted(p.name for p in (tmp_path / "repo").iterdir() if p.is_dir())
    beside = [
        f"{b.spec.name}_{v.name}"
        for b in result.models
        for v in b.passed
        if v != b.served and v.runtime == ONNXRUNTIME
    ]
    assert folders == sorted(["conv", "scalar", *beside])
    assert {"conv_fp32", "conv_int8"} & set(folders), folders


def test_failure_lines_cut_cache_paths_to_file_names_and_keep_tensor_names() -> None:
    exc = RuntimeError(
        "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from "
        "/home/u/.tritonforge/cache/m/int8/0a1b.tmp-42/quant.x/int8.onnx failed: "
        "Unrecognized attribute: axis\n"
        "second line"
    )
    assert failure_line(exc) == (
        "RuntimeError: [ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from int8.onnx failed: "
        "Unrecognized attribute: axis"
    )
    assert failure_line(ValueError("tensor /model/conv/Conv_output_0 and 1/2")) == (
        "ValueError: tensor /model/conv/Conv_output_0 and 1/2"
    )


def test_a_graph_onnx_runtime_cannot_run_fails_in_one_line_naming_model_and_stage(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])
    shape = numpy_helper.from_array(np.array([5], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "bad", [x], [y], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = f.IR_VERSION
    f.save(model, tmp_path / "bad.onnx")
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [{"name": "bad", "source": "bad.onnx"}]}))
    with pytest.raises(SpecError) as err:
        build(BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lambda _: None))
    line = err.value.one_line()
    assert line.startswith(f"{tmp_path / 'models.yaml'}: model 'bad': source: reference stage failed: ")
    assert "\n" not in line and not (tmp_path / "repo").exists()


def test_a_graph_quantized_already_is_served_as_it_comes(tmp_path: Path) -> None:
    """An INT8 file is not quantized or halved again (an INT8 MiniLM quantized a second time served
    at cosine 0.953 to its own file): its other variants are left out saying why, and the file
    serves as it is, as the fp32 variant, on each runtime that verifies it."""
    import onnxruntime.quantization as q

    f.save(f.conv_graph(13), tmp_path / "float.onnx")
    q.quantize_dynamic(tmp_path / "float.onnx", tmp_path / "int8.onnx", weight_type=q.QuantType.QInt8)
    models = [{"name": "done", "source": "int8.onnx", "precisions": ["fp32", "fp16", "int8_dynamic"]}]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    lines: list[str] = []
    result = build(
        BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lines.append)
    )
    (b,) = result.models
    assert passed_on_onnxruntime(result) == {"done": ["fp32"]} and b.served is not None
    assert b.served.precision.value == "fp32"
    for variant in ("fp16", "int8_dynamic"):
        (line,) = [x for x in lines if x.startswith(f"[done] variant {variant} not published: ")]
        assert "the graph is already quantized (" in line


def test_a_graph_with_weight_only_int8_weights_is_served_as_it_comes(tmp_path: Path) -> None:
    """A third-party INT8 MiniLM stores its MatMul weights as int8 initializers dequantized by Cast
    and Mul: it is recognised (and not simplified, which would fold its weights into float ones),
    neither halved nor quantized again, and the file serves as it is, answering as ONNX Runtime
    does on the user's own file."""
    import onnx
    import onnxruntime as ort

    f.save(f.weight_only_int8_graph(), tmp_path / "minilm_int8.onnx")
    models = [{"name": "mini", "source": "minilm_int8.onnx", "precisions": ["fp32", "fp16", "int8_dynamic"]}]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    lines: list[str] = []
    result = build(
        BuildOptions(tmp_path / "models.yaml", tmp_path / "repo", target="local", log=lines.append)
    )
    (b,) = result.models
    assert passed_on_onnxruntime(result) == {"mini": ["fp32"]} and b.served is not None
    for variant in ("fp16", "int8_dynamic"):
        (line,) = [x for x in lines if x.startswith(f"[mini] variant {variant} not published: ")]
        assert "the graph is already quantized (2 int8 weights through Cast)" in line
    manifest = json.loads((tmp_path / "repo" / "manifest.json").read_text())["models"]["mini"]
    assert set(manifest["published"].values()) == {"fp32"}
    published = tmp_path / "repo" / "mini" / "1" / "model.onnx"
    kept = onnx.load(published).graph
    assert {i.name for i in kept.initializer if i.data_type == onnx.TensorProto.INT8} == {
        "layer.0.weight", "layer.1.weight",
    }  # fmt: skip
    rng = np.random.default_rng(3)
    mask = np.ones((3, 7), np.int64)
    mask[1, 4:] = 0
    feed = {"input_ids": rng.integers(0, 100, (3, 7)).astype(np.int64), "attention_mask": mask}
    own = ort.InferenceSession(str(tmp_path / "minilm_int8.onnx"), providers=["CPUExecutionProvider"])
    served = ort.InferenceSession(str(published), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(served.run(None, feed)[0], own.run(None, feed)[0])


def test_a_variant_whose_rows_move_runs_each_row_alone_on_local_and_is_refused_on_cpu(tmp_path: Path) -> None:
    """ONNX Runtime's dynamic INT8 takes one scale for all the rows of a run: the local target
    publishes it to run each row on its own; the cpu target's backend cannot, so it says why in a
    line and in the manifest, and serves and publishes the variants whose rows do not move."""
    f.save(f.slashed_names_graph(), tmp_path / "names.onnx")
    models = [{"name": "names", "source": "names.onnx", "precisions": ["fp32", "int8_dynamic"]}]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    manifests, lines = {}, {}
    for target in ("local", "cpu"):
        said: list[str] = []
        repo = tmp_path / f"repo_{target}"
        build(BuildOptions(tmp_path / "models.yaml", repo, target=target, log=said.append))
        manifests[target] = json.loads((repo / "manifest.json").read_text())["models"]["names"]
        lines[target] = [
            line for line in said if line.startswith("[names] variant int8_dynamic not published")
        ]
    local, cpu = manifests["local"], manifests["cpu"]
    assert local["verification"]["int8_dynamic"]["batch_max_diff"] > BATCH_INVARIANCE
    assert "int8_dynamic" in local["published"].values() and "not_published" not in local
    alone = [name for name, v in local["published"].items() if v == "int8_dynamic"]
    assert '"run_alone"' in (tmp_path / "repo_local" / alone[0] / "config.pbtxt").read_text()
    assert not lines["local"]
    why = cpu["not_published"]["int8_dynamic"]
    assert why.startswith("its answer for a row moves with the rows beside it (")
    assert why.endswith("and the cpu target's backend runs a request's rows together")
    assert lines["cpu"] == [f"[names] variant int8_dynamic not published: {why}"]
    assert cpu["published"] == {"names": "fp32"}
