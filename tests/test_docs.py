"""The docs' examples are true to the code: every Python block parses, the spec example is a
valid spec, the example target of docs/targets.md is a complete Target that writes a config, the
example source of docs/sources.md has every member of a source, exports its archive and runs it,
and its example task, registered with one line, is named by the architectures it does and composes
a valid spec."""

import re
from pathlib import Path

import pytest
import yaml

from builder.spec import Precision, Spec, load_spec
from builder.targets import get

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", doc.read_text(), re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_python_block_parses(doc: Path) -> None:
    for code in blocks(doc, "python"):
        compile(code, str(doc), "exec")


def test_the_spec_example_is_a_valid_spec() -> None:
    (example,) = blocks(ROOT / "docs" / "spec.md", "yaml")
    model = Spec.model_validate(yaml.safe_load(example)).models[0]
    assert model.targets == {"gpu": {"serve": "int8"}}  # a target left out: the fastest
    assert get("gpu").options(model).precision is Precision.INT8


def test_the_object_detector_examples_are_valid_blocks() -> None:
    from builder.spec import Tolerance
    from builder.spec.detection import Detection

    text = (ROOT / "docs" / "spec.md").read_text()
    section = text.split("## An object detector", 1)[1].split("\n## ", 1)[0]
    (checkpoint, graph, tolerances) = [
        yaml.safe_load(block) for block in re.findall(r"```yml\n(.*?)```", section, flags=re.S)
    ]
    assert checkpoint["models"][0]["task"] == "object-detection"
    block = Detection.model_validate(graph["models"][0]["detection"])
    assert (block.letterbox.size, block.labels, block.default_threshold) == ([640, 640], "coco.txt", 0.25)
    parsed = {p: Tolerance.model_validate(t) for p, t in tolerances["tolerances"].items()}
    assert all(t.detection is not None for t in parsed.values())


def test_the_example_target_is_complete_and_writes_a_config() -> None:
    (code,) = [c for c in blocks(ROOT / "docs" / "targets.md", "python") if "class OrtOpenVinoTarget" in c]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/targets.md", "exec"), namespace)
    target = namespace["OrtOpenVinoTarget"]()  # type: ignore[operator]
    resnet = next(m for m in load_spec(ROOT / "models.yaml").models if m.name == "resnet18")
    cfg = target.core_config(resnet, "resnet18", Precision.FP32)
    (accelerator,) = cfg.optimization.execution_accelerators.cpu_execution_accelerator
    assert cfg.platform == "onnxruntime_onnx" and accelerator.name == "openvino"
    assert cfg.max_batch_size == resnet.max_batch_size
    assert cfg.instance_group[0].count == resnet.instances.count and cfg.HasField("dynamic_batching")


@pytest.mark.filterwarnings("ignore:`torch.jit.s:DeprecationWarning")  # making the archive
def test_the_example_source_is_complete_and_exports_and_runs_its_archive(tmp_path: Path) -> None:
    import numpy as np
    import torch
    from typing_extensions import get_protocol_members

    from builder.errors import SpecError
    from builder.sources import ModelSource
    from builder.stages.export import write_onnx
    from builder.stages.runtimes import run_onnx
    from tests.builder.sources.entries import model

    (code,) = [c for c in blocks(ROOT / "docs" / "sources.md", "python") if "class TorchScriptSource" in c]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/sources.md", "exec"), namespace)
    source = namespace["TorchScriptSource"]()  # type: ignore[operator]
    assert all(hasattr(source, member) for member in get_protocol_members(ModelSource))
    entry = model("m.onnx").model_copy(update={"source": "m.pt"})  # what the spec would then accept
    assert source.kind == "torchscript"
    with pytest.raises(SpecError):
        source.check_paths(entry, tmp_path, tmp_path / "models.yaml")
    torch.jit.save(torch.jit.script(torch.nn.ReLU()), str(tmp_path / "m.pt"))
    x = np.array([[-1.0, 0.0, 2.0, -3.0]], np.float32)
    out = source.reference(entry, {"x": x}, spec_dir=tmp_path, spec_file=tmp_path, log=tmp_path / "log")
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
    load = lambda: source.load(entry, tmp_path, tmp_path / "models.yaml")  # noqa: E731
    exported = write_onnx(entry, load, spec_file=tmp_path / "models.yaml", out=tmp_path / "m.onnx")
    np.testing.assert_array_equal(run_onnx(exported, {"x": x}, batch_size=0)["y"], np.maximum(x, 0))


def _module_code(doc: str, marker: str) -> str:
    (code,) = [c for c in blocks(ROOT / "docs" / doc, "python") if marker in c]
    return code


def test_the_example_runtime_is_one_module_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/architecture.md's runtime, run as a module of the runtimes package: registered by its
    line, it is a variant the spec takes and the stages open, or refuse in one line where this
    onnxruntime has no XNNPACK provider."""
    import numpy as np
    import onnxruntime as ort

    from builder.errors import ModelRefused
    from builder.python_models.shared import runtimes
    from builder.spec import Variant
    from builder.stages.runtimes import open_variant
    from tests.builder.python_models.shared.runtimes.graphs import matmul

    package = "builder.python_models.shared.runtimes"
    module: dict[str, object] = {"__name__": f"{package}.xnnpack", "__package__": package}
    exec(compile(_module_code("architecture.md", "class Xnnpack"), "docs/architecture.md", "exec"), module)
    line = _module_code("architecture.md", "RUNTIMES: dict[str, CpuRuntime]")
    registry: dict[str, object] = {**vars(runtimes), "Xnnpack": module["Xnnpack"]}
    exec(compile(line, "docs/architecture.md", "exec"), registry)
    registered: dict[str, object] = registry["RUNTIMES"]  # type: ignore[assignment]
    assert list(registered) == ["onnxruntime", "openvino", "xnnpack"]
    monkeypatch.setitem(runtimes.RUNTIMES, "xnnpack", registered["xnnpack"])
    variant = Variant.parse("fp32_xnnpack")
    path = matmul(tmp_path / "model.onnx")
    if "XnnpackExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(ModelRefused, match="no XNNPACK execution provider"):
            open_variant(variant, path)
        return
    x = np.ones((2, 16), np.float32)
    assert open_variant(variant, path).run(["y"], {"x": x})[0].shape == (2, 8)


def test_the_example_stage_makes_the_fp16_graph_through_the_stage_cache(tiny_project: Path) -> None:
    """docs/architecture.md's stage, run by the stage cache after the real export and check."""
    import numpy as np

    from builder.cache import StageCache
    from builder.records import BuildContext
    from builder.sources import source_of
    from builder.spec import load_spec
    from builder.stages.base import GRAPH, ModelJob, run_stage
    from builder.stages.check import CHECK
    from builder.stages.export import EXPORT
    from builder.stages.runtimes import ort_session

    module: dict[str, object] = {"__name__": "builder.stages.fp16_ort"}
    exec(compile(_module_code("architecture.md", "class Fp16Ort"), "docs/architecture.md", "exec"), module)
    spec_file = tiny_project / "models.yaml"
    spec = load_spec(spec_file)
    model = spec.models[0]
    ctx = BuildContext(
        spec, spec_file, tiny_project, StageCache(tiny_project / "cache", lambda _: None), print
    )
    job = ModelJob(model, ctx, source_of(model))
    run_stage(job, EXPORT)
    run_stage(job, CHECK)
    made = run_stage(job, module["FP16_ORT"])  # type: ignore[arg-type]
    again = run_stage(job, module["FP16_ORT"])  # type: ignore[arg-type]
    assert made.name == "fp16" and again.skipped and again.key == made.key
    x = np.random.default_rng(0).normal(size=(2, 16)).astype(np.float32)
    name = model.inputs[0].name
    half = ort_session(made.out / GRAPH).run(None, {name: x})[0]
    full = ort_session(job.graph(CHECK.name)).run(None, {name: x})[0]
    np.testing.assert_allclose(half, full, rtol=0.05, atol=0.05)


def test_the_example_task_registered_composes_a_valid_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    from transformers.models.auto import modeling_auto

    from builder.tasks import TASKS, task, task_for_architecture
    from tests.builder.tasks.checkpoints import composed, image

    (code,) = [c for c in blocks(ROOT / "docs" / "sources.md", "python") if "class DepthEstimation" in c]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/sources.md", "exec"), namespace)
    estimator = namespace["DepthEstimation"]()  # type: ignore[operator]  # abstract members all given
    monkeypatch.setitem(TASKS, estimator.name, estimator)  # the registry line
    assert hasattr(transformers, estimator.auto_class) and "dpt" in getattr(modeling_auto, estimator.mapping)
    assert task_for_architecture("DPTForDepthEstimation") is estimator is task("depth-estimation")
    spec = composed(image("depth-estimation"), name="dpt")
    assert [(t.name, t.dims) for t in spec.model("dpt").outputs] == [("predicted_depth", [32, 32])]
    assert [m.name for m in spec.python_models] == ["dpt_preprocess"]
    (pipeline,) = spec.ensembles
    assert [t.name for t in pipeline.inputs] == ["IMAGE"]
    assert [t.name for t in pipeline.outputs] == ["DEPTH"]
