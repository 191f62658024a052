"""`tritonforge perf`: shapes and real input data derived from the spec."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

from builder.perf_inputs import core_model, real_input_data, spec_shapes
from builder.spec import load_spec

ROOT = Path(__file__).parents[2]

TEXT_SPEC = """
models:
  - name: encoder
    source: textzoo:build
    inputs:
      - {name: input_ids, dtype: INT64, dims: [-1]}
      - {name: attention_mask, dtype: INT64, dims: [-1]}
    outputs: [{name: embedding, dtype: FP32, dims: [8]}]
    max_batch_size: 8
    profiles:
      - opt_batch: 4
        shapes:
          input_ids: {min: [1], opt: [64], max: [128]}
          attention_mask: {min: [1], opt: [64], max: [128]}
    calibration: {data: sentences.txt, reader: textzoo:read}
    evaluation: {data: sentences.txt, reader: textzoo:read}
    tolerances: {fp32: {min_cosine: 0.99}}
python_models:
  - name: tokenize
    path: tokenize
    inputs: [{name: TEXT, dtype: STRING, dims: [1]}]
    outputs:
      - {name: input_ids, dtype: INT64, dims: [-1]}
      - {name: attention_mask, dtype: INT64, dims: [-1]}
    max_batch_size: 8
ensembles:
  - name: embed
    max_batch_size: 8
    inputs: [{name: TEXT, dtype: STRING, dims: [1]}]
    outputs: [{name: EMBEDDING, dtype: FP32, dims: [8]}]
    steps:
      - {model: tokenize, inputs: {TEXT: TEXT}, outputs: {input_ids: ids, attention_mask: mask}}
      - {model: encoder, inputs: {input_ids: ids, attention_mask: mask}, outputs: {embedding: EMBEDDING}}
  - name: direct
    max_batch_size: 8
    inputs:
      - {name: IDS, dtype: INT64, dims: [-1]}
      - {name: MASK, dtype: INT64, dims: [-1]}
    outputs: [{name: EMBEDDING, dtype: FP32, dims: [8]}]
    steps:
      - {model: encoder, inputs: {input_ids: IDS, attention_mask: MASK}, outputs: {embedding: EMBEDDING}}
"""

TEXTZOO = """
import numpy as np

def read(path):
    lines = [s for s in open(path).read().splitlines() if s.strip()]
    n = max(len(s.split()) for s in lines)
    ids = np.array([[i + 1 for i, _ in enumerate(s.split())] + [0] * (n - len(s.split())) for s in lines])
    return {"input_ids": ids.astype(np.int64), "attention_mask": (ids > 0).astype(np.int64)}
"""


def _text_project(tmp_path: Path) -> Path:
    (tmp_path / "models.yaml").write_text(TEXT_SPEC)
    (tmp_path / "textzoo.py").write_text(TEXTZOO)
    (tmp_path / "sentences.txt").write_text("# a comment\nthe first sentence\n\nsecond one here too\n")
    return tmp_path / "models.yaml"


def test_opt_shapes_for_core_models_and_ensembles(tmp_path: Path) -> None:
    spec = load_spec(_text_project(tmp_path))
    by = {m.name: m for m in spec.all_models()}
    assert spec_shapes(spec, by["encoder"]) == {"input_ids": [64], "attention_mask": [64]}
    assert spec_shapes(spec, by["direct"]) == {"IDS": [64], "MASK": [64]}
    assert spec_shapes(spec, by["embed"]) == {}  # a STRING [1] input: static
    assert spec_shapes(spec, by["tokenize"]) == {}  # the server's config decides
    assert core_model(spec, by["tokenize"]) is by["encoder"]


def test_sentences_become_string_input_data(tmp_path: Path) -> None:
    spec_file = _text_project(tmp_path)
    spec = load_spec(spec_file)
    embed = next(e for e in spec.ensembles if e.name == "embed")
    out = real_input_data(spec, spec_file, embed, tmp_path / "out" / "embed.json")
    assert out is not None
    data = json.loads(out.read_text())["data"]
    assert data == [
        {"TEXT": {"content": ["the first sentence"], "shape": [1]}},
        {"TEXT": {"content": ["second one here too"], "shape": [1]}},
    ]


def test_dynamic_core_model_gets_its_calibration_samples(tmp_path: Path) -> None:
    spec_file = _text_project(tmp_path)
    spec = load_spec(spec_file)
    out = real_input_data(spec, spec_file, spec.model("encoder"), tmp_path / "encoder.json")
    assert out is not None
    first = json.loads(out.read_text())["data"][0]["input_ids"]
    assert first["shape"] == [4]
    assert struct.unpack("<4q", base64.b64decode(first["content"]["b64"])) == (1, 2, 3, 0)


def test_image_ensemble_gets_the_calibration_images(tmp_path: Path) -> None:
    spec_file = ROOT / "models.yaml"
    spec = load_spec(spec_file)
    ens = next(e for e in spec.ensembles if e.name == "resnet18_image")
    out_dir = tmp_path
    out = real_input_data(spec, spec_file, ens, out_dir / "img.json")
    assert out is not None
    entries = json.loads(out.read_text())["data"]
    images = sorted((ROOT / "calibration" / "resnet18" / "calib").glob("*.jpg"))
    assert len(entries) == min(64, len(images))
    raw = base64.b64decode(entries[0]["IMAGE"]["content"]["b64"])
    assert struct.unpack("<I", raw[:4])[0] == len(raw) - 4 and raw[4:] == images[0].read_bytes()
    assert real_input_data(spec, spec_file, spec.model("resnet18"), out_dir / "r.json") is None
    assert real_input_data(spec, spec_file, spec.model("simple"), out_dir / "s.json") is None
