"""Task clients (Embedder, Classifier) and `python -m clients`, against the real server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from clients import Classifier, Client, Embedder, Prediction
from tests.clients._helpers import assert_no_regions

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]
PROTOCOL = ["grpc"]
PHOTOS = ROOT / "calibration" / "resnet18" / "eval"
CAT_PHOTO, COFFEE_PHOTO = PHOTOS / "eval_003_chelsea.jpg", PHOTOS / "eval_016_coffee.jpg"
CATS = {"tabby, tabby cat", "tiger cat", "Egyptian cat"}  # ImageNet's names for house cats


def served(triton: Any, model: str) -> bool:
    with Client(triton.grpc_url) as c:
        return c.is_ready(model)


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i, size in enumerate([(224, 224), (300, 200), (64, 96)]):
        path = tmp_path / f"image{i}.png"
        Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def test_embedder(triton: Any, protocol: str, url: str) -> None:
    assert served(triton, "minilm_embed"), "minilm_embed is in the default zoo: it must be served"
    texts = ["A cat sits on the mat.", "Triton serves models.", "Ünïcödé text ✓", ""]
    with Embedder(url, protocol=protocol) as embedder:
        vectors = embedder.embed(texts)
        assert vectors.shape == (4, 384) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-4)
        # int8_dynamic scales activations per batch: alone and batched differ slightly, not in direction.
        alone = embedder.embed(texts[1])[0]
        assert float(alone @ vectors[1]) > 0.99
        limit = embedder.client.model("minilm_embed").max_batch_size
        many = [f"sentence number {i}" for i in range(limit + 3)]  # split in two requests
        batched = embedder.embed(many)
        assert batched.shape == (len(many), 384)
        assert float(embedder.embed(many[-1:])[0] @ batched[-1]) > 0.99
        assert embedder.embed([]).shape == (0, 384)


def test_classifier(triton: Any, protocol: str, url: str, images: list[Path]) -> None:
    with Classifier(url, protocol=protocol) as classifier:
        results = classifier.classify([str(p) for p in images], top_k=5)
        assert len(results) == 3
        for preds in results:
            assert len(preds) == 5 and all(isinstance(p, Prediction) for p in preds)
            scores = [p.score for p in preds]
            assert scores == sorted(scores, reverse=True)
            assert all(p.label and 0 <= p.index < 1000 for p in preds)
        # bytes, a path object and an array give the same answer as the path string
        same = classifier.classify([images[0].read_bytes(), images[0]], top_k=3)
        assert same[0] == same[1] == results[0][:3]
        array = np.asarray(Image.open(images[0]))
        assert classifier.classify(array, top_k=1)[0][0].index == results[0][0].index
        # the zoo's classifier has ImageNet weights and names: its photos get their real classes
        cat, coffee = classifier.classify([CAT_PHOTO, COFFEE_PHOTO], top_k=1)
        assert cat[0].label in CATS and coffee[0].label == "espresso", (cat, coffee)
    assert_no_regions(triton)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "clients", "-p", PROTOCOL[0], *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_command_line(triton: Any, url: str, protocol: str, images: list[Path], tmp_path: Path) -> None:
    PROTOCOL[0] = protocol
    assert cli("-u", url, "ready", "--model", "simple").stdout.strip() == "ready"
    meta = json.loads(cli("-u", url, "metadata", "simple").stdout)
    assert meta["name"] == "simple"
    assert int(json.loads(cli("-u", url, "config", "simple").stdout)["max_batch_size"]) == 8
    np.save(tmp_path / "ones.npy", np.ones((2, 16), np.int32))
    row = json.dumps([list(range(16)), list(range(16, 32))])
    done = cli("-u", url, "infer", "simple", "-i", f"INPUT0={row}", "-i", f"INPUT1={tmp_path / 'ones.npy'}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["OUTPUT0"][1][0] == 17 and out["OUTPUT1"][0][15] == 14
    shown = cli("-u", url, "classify", str(images[0]), "--top-k", "2")
    assert shown.returncode == 0 and shown.stdout.startswith(str(images[0]) + ": "), shown.stderr
    cat = cli("-u", url, "classify", str(CAT_PHOTO), "--top-k", "1")
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout.startswith(f"{CAT_PHOTO}: ") and any(name in cat.stdout for name in CATS), cat.stdout
    missing = cli("-u", url, "metadata", "no_such_model")
    assert missing.returncode == 1 and "ModelNotFound" in missing.stderr
    vectors = json.loads(cli("-u", url, "embed", "hello", "world").stdout)
    assert len(vectors) == 2 and len(vectors[0]) == 384
