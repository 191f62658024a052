"""Each Python-backend model's names are one contract module its package holds or links to: every
model's copy imports it as a sibling, as python_backend imports the model, and the builder writes
no parameter or tensor name the model's contract does not declare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.python_models import PACKAGES, copy_sources, model_sources, package
from builder.python_models.shared import onnx_contract, processing_contract, runtimes
from builder.python_models.shared.runtimes import onnxruntime as ort_runtime
from builder.python_models.shared.runtimes import openvino
from builder.spec import ModelSpec, Precision, load_spec
from builder.targets import get
from tests.builder.fixtures import hf_checkpoints as hf
from tests.builder.fixtures.recurrent import entries

MODELS = sorted(p.name for p in PACKAGES.iterdir() if (p / "model.py").is_file())
# Stands in for the server's triton_python_backend_utils: what the models read when imported.
BACKEND_UTILS = "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1\nTRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2\n"


def declared(contract: object) -> set[str]:
    return {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}


@pytest.mark.parametrize("name", MODELS)
def test_every_model_copy_imports_its_contract_as_python_backend_imports_it(
    name: str, tmp_path: Path
) -> None:
    version = tmp_path / name / "1"
    copy_sources(model_sources(package(name)), version)
    if (package(name) / "contract.py").exists():
        assert (version / "contract.py").is_file() and not (version / "contract.py").is_symlink()
    (tmp_path / "stub" / "triton_python_backend_utils.py").parent.mkdir()
    (tmp_path / "stub" / "triton_python_backend_utils.py").write_text(BACKEND_UTILS)
    paths = [str(version), str(version.parent), str(tmp_path / "stub")]
    code = f"import sys, importlib; sys.path[:0] = {paths!r}; importlib.import_module('1.model')"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_local_target_writes_only_its_runners_contract_keys() -> None:
    tensor = {"name": "x", "dtype": "FP32", "dims": [4]}
    queued = ModelSpec.model_validate({
        "name": "m", "source": "m.onnx", "max_batch_size": 8, "inputs": [tensor], "outputs": [tensor],
        "tolerances": {"fp32": {"max_abs": 0.0}}, "targets": {"local": {"spinning": True}},
        "batching": {"queue": {"max_queue_size": 16, "default_timeout_us": 1000}},
    })  # fmt: skip
    stateful = ModelSpec.model_validate(next(e for e in entries() if e["name"] == "vad"))
    written = set()
    for spec in (queued, stateful):
        written |= set(get("local").core_config(spec, spec.name, Precision.FP32).parameters)
    assert {onnx_contract.MAX_QUEUE_SIZE, ort_runtime.ALLOW_SPINNING, onnx_contract.SEQUENCE_STATE} <= written
    # the model's own keys, and its runtime's (shared/runtimes: the runtime, the precision, its knobs)
    runtime_keys = declared(runtimes) | declared(runtimes.base) | declared(ort_runtime) | declared(openvino)
    assert written <= declared(onnx_contract) | runtime_keys


def test_a_checkpoint_pipeline_names_only_the_processing_contracts_tensors(tmp_path: Path) -> None:
    """Beyond the core model's own inputs (the tokenizer's model_input_names, pixel_values), every
    name the processing models and the pipeline take, give or are configured with is declared."""
    models = [
        {"name": "sentiment", "source": str(hf.bert(tmp_path / "sentiment", "sequence")),
         "task": "text-classification"},
        {"name": "ner", "source": str(hf.bert(tmp_path / "ner", "token")), "task": "token-classification"},
        {"name": "ranks", "source": str(hf.cross_encoder(tmp_path / "ranks")), "task": "text-ranking"},
        {"name": "photos", "source": str(hf.vit(tmp_path / "photos")), "task": "image-classification"},
    ]  # fmt: skip
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    spec = load_spec(tmp_path / "models.yaml")
    core = {t.name for m in spec.models for t in m.inputs}
    tensors = {t.name for pm in spec.python_models for t in [*pm.inputs, *pm.outputs]}
    tensors |= {t.name for e in spec.ensembles for t in [*e.inputs, *e.outputs]}
    assert tensors - core <= declared(processing_contract)
    parameters = {k for pm in spec.python_models for k in pm.parameters}
    assert parameters == {processing_contract.MAX_LENGTH, processing_contract.TRUNCATION}


def test_a_detectors_models_name_only_their_contracts_tensors_and_parameters(tmp_path: Path) -> None:
    """The detectors' processing models and pipelines (a DETR checkpoint's, a YOLO-style graph's)
    take, give and are configured with names the detection contract (and the image processor's)
    declares, beyond the core model's own tensors."""
    from builder.python_models.hf_image_processor import contract as image_contract
    from builder.python_models.hf_object_detection import contract as detection_contract
    from tests.builder.fixtures import detectors

    models = [
        {"name": "detr", "source": str(detectors.detr(tmp_path / "detr")), "task": "object-detection"},
        {"name": "yolo", "source": str(detectors.yolo(tmp_path / "yolo.onnx")), "task": "object-detection"},
    ]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    spec = load_spec(tmp_path / "models.yaml")
    core = {t.name for m in spec.models for t in [*m.inputs, *m.outputs]}
    tensors = {t.name for pm in spec.python_models for t in [*pm.inputs, *pm.outputs]}
    tensors |= {t.name for e in spec.ensembles for t in [*e.inputs, *e.outputs]}
    assert tensors - core <= declared(detection_contract) | declared(image_contract)
    assert {k for pm in spec.python_models for k in pm.parameters} <= declared(detection_contract)
