"""zoo.resnet: the ResNet-18 module, its image reader and its calibration / evaluation images."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from numpy.typing import NDArray

from builder.errors import DataError
from builder.sources import export, load_source
from builder.spec import load_spec
from builder.stages.check import check
from builder.stages.export import torch_reference
from zoo.resnet import ResNet18, read_images, resnet18

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "models.yaml"
IMAGES = ROOT / "calibration" / "resnet18"
TORCHVISION_RESNET18_PARAMS = 11_689_512


@pytest.fixture(scope="module")
def eval_images() -> np.ndarray:
    return read_images(IMAGES / "eval")["input"]


@pytest.fixture(scope="module")
def eval_logits(eval_images: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return resnet18()(torch.from_numpy(eval_images)).numpy()


def test_architecture_is_resnet18() -> None:
    model = resnet18()
    assert not model.training
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_RESNET18_PARAMS
    names = set(model.state_dict())
    assert {"layer2.0.downsample.1.running_var", "layer4.1.bn2.weight", "fc.bias"} <= names
    with torch.no_grad():
        assert model(torch.zeros(2, 3, 224, 224)).shape == (2, 1000)


def test_weights_are_the_same_on_every_call() -> None:
    first, second = resnet18().state_dict(), resnet18().state_dict()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name


def test_logits_are_not_degenerate(eval_logits: np.ndarray) -> None:
    assert np.isfinite(eval_logits).all()
    assert eval_logits.std(axis=1).min() > 0.5  # every image spreads its logits
    assert len(set(eval_logits.argmax(axis=1))) >= 6  # images disagree on the top class
    unit = eval_logits / np.linalg.norm(eval_logits, axis=1, keepdims=True)
    cosine = unit @ unit.T
    off_diagonal = cosine[~np.eye(len(cosine), dtype=bool)]
    assert off_diagonal.mean() < 0.3


def _resnet18() -> ResNet18:
    model = resnet18()
    assert isinstance(model, ResNet18)
    return model


def test_pooled_features_differ_from_image_to_image(eval_images: NDArray[np.float32]) -> None:
    with torch.no_grad():
        features = _resnet18().features(torch.from_numpy(eval_images)).numpy()
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    cosine = (unit @ unit.T)[~np.eye(len(unit), dtype=bool)]
    assert cosine.mean() < 0.75  # a random deep net without the near-identity blocks gives ~0.85


def test_logits_ignore_the_common_feature_component() -> None:
    model = _resnet18()
    assert not model.fc.bias.any()
    calib = torch.from_numpy(read_images(IMAGES / "calib")["input"][:16])
    with torch.no_grad():
        mean = model.features(calib).mean(0)
        logits = model(calib)
    weight = model.fc.weight
    assert (weight @ mean).norm() < 1e-3 * weight.norm() * mean.norm()
    assert logits.mean(0).abs().max() < 1e-3 * logits.std()  # logits average zero over the photographs


def test_read_images_reads_every_image_in_name_order(tmp_path: Path) -> None:
    sources = sorted((IMAGES / "eval").glob("*.jpg"))[:3]
    for name, src in zip(["b.JPG", "a.jpeg", "c.png"], sources, strict=True):
        shutil.copy(src, tmp_path / name)
    (tmp_path / "notes.txt").write_text("not an image")
    batch = read_images(tmp_path)["input"]
    assert batch.shape == (3, 3, 224, 224) and batch.dtype == np.float32
    single = read_images(IMAGES / "eval")["input"]
    index = {p.name: i for i, p in enumerate(sorted((IMAGES / "eval").glob("*.jpg")))}
    np.testing.assert_array_equal(batch[0], single[index[sources[1].name]])  # a.jpeg comes first


def test_read_images_rejects_missing_or_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_images(tmp_path / "absent")
    with pytest.raises(DataError, match=r"no \.jpg"):
        read_images(tmp_path)


def test_calibration_and_evaluation_sets_are_small_and_disjoint() -> None:
    calib = sorted((IMAGES / "calib").glob("*.jpg"))
    evals = sorted((IMAGES / "eval").glob("*.jpg"))
    assert (len(calib), len(evals)) == (64, 32)
    assert sum(p.stat().st_size for p in calib + evals) < 2_000_000
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in calib + evals]
    assert len(set(digests)) == len(digests)


def test_labels_name_a_thousand_classes() -> None:
    labels = (ROOT / "zoo" / "resnet18_labels.txt").read_text().splitlines()
    assert len(labels) == len(set(labels)) == 1000


@pytest.mark.slow
def test_exported_onnx_matches_torch_on_eval_images(tmp_path: Path, eval_images: np.ndarray) -> None:
    model = load_spec(SPEC).model("resnet18")
    exported = export(model, spec_dir=ROOT, spec_file=SPEC, out=tmp_path / "resnet18.onnx")
    checked = check(model, exported, tmp_path / "checked.onnx", spec_file=SPEC)
    reference = torch_reference(
        model, load_source(model, spec_dir=ROOT, spec_file=SPEC), {"input": eval_images}
    )
    assert reference is not None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(checked), options, providers=["CPUExecutionProvider"])
    for start, size in ((0, 8), (8, 3), (11, 21)):  # several batch sizes through the dynamic axis
        batch = eval_images[start : start + size]
        (logits,) = session.run(["logits"], {"input": batch})
        np.testing.assert_allclose(logits, reference["logits"][start : start + size], rtol=0, atol=1e-4)


@pytest.mark.slow
def test_int8_calibrated_as_the_spec_says_keeps_the_logits(
    tmp_path: Path, eval_images: NDArray[np.float32]
) -> None:
    from builder.data import load_samples
    from builder.stages.quantize import quantize_int8
    from builder.stages.runtimes import run_onnx
    from builder.stages.verify import output_metrics

    model = load_spec(SPEC).model("resnet18")
    assert model.calibration is not None
    exported = export(model, spec_dir=ROOT, spec_file=SPEC, out=tmp_path / "resnet18.onnx")
    checked = check(model, exported, tmp_path / "checked.onnx", spec_file=SPEC)
    samples = load_samples(model.calibration, model, spec_dir=ROOT, spec_file=SPEC, section="calibration")
    int8 = quantize_int8(model, checked, samples, tmp_path / "int8").onnx
    with torch.no_grad():
        reference = resnet18()(torch.from_numpy(eval_images)).numpy()
    logits = run_onnx(int8, {"input": eval_images}, batch_size=8)["logits"]
    metrics = output_metrics(reference, logits)
    assert metrics.mean_cosine is not None and metrics.min_cosine is not None
    assert metrics.mean_cosine >= 0.99 and metrics.min_cosine >= 0.97
