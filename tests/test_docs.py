"""The docs' examples are true to the code: every Python block parses, the spec example is a
valid spec, and the example target of docs/targets.md is a complete Target that writes a config."""

import re
from pathlib import Path

import pytest
import yaml

from builder.spec import Precision, Spec, load_spec

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
    assert model.serve.variants() == {"gpu": Precision.INT8}  # a target left out: the fastest


def test_the_example_target_is_complete_and_writes_a_config() -> None:
    (code,) = [c for c in blocks(ROOT / "docs" / "targets.md", "python") if "class OpenVinoTarget" in c]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/targets.md", "exec"), namespace)
    target = namespace["OpenVinoTarget"]()  # type: ignore[operator]
    resnet = next(m for m in load_spec(ROOT / "models.yaml").models if m.name == "resnet18")
    cfg = target.core_config(resnet, "resnet18", Precision.FP32)
    assert cfg.backend == "openvino" and cfg.max_batch_size == resnet.max_batch_size
    assert cfg.instance_group[0].count == resnet.instances.count and cfg.HasField("dynamic_batching")
