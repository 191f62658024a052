"""A small Python-backend repository: a dynamic-dim model, a STRING model, a bytes (image) model."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

DYN_ADD = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            t = pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32))
            out.append(pb_utils.InferenceResponse([t]))
        return out
"""

TEXT_LEN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            n = np.array([[len(x[0].decode("utf-8").split())] for x in text], dtype=np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("WORDS", n)]))
        return out
"""

IMAGE_SIZE = """
import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            blobs = pb_utils.get_input_tensor_by_name(r, "IMAGE").as_numpy()
            sizes = np.array([Image.open(io.BytesIO(b[0])).size for b in blobs], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SIZE", sizes)]))
        return out
"""


def _tensor(cls, name: str, dtype: str, dims: list[int]):
    return cls(name=name, data_type=mc.DataType.Value(f"TYPE_{dtype}"), dims=dims)


def _model(repo: Path, name: str, source: str, inputs: list, outputs: list) -> None:
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    cfg.input.extend(_tensor(mc.ModelInput, *t) for t in inputs)
    cfg.output.extend(_tensor(mc.ModelOutput, *t) for t in outputs)
    cfg.dynamic_batching.SetInParent()
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(cfg))


def write_repo(repo: Path) -> Path:
    _model(repo, "dyn_add", DYN_ADD, [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
           [("OUTPUT0", "FP32", [-1])])  # fmt: skip
    _model(repo, "text_len", TEXT_LEN, [("TEXT", "STRING", [1])], [("WORDS", "INT32", [1])])
    _model(repo, "image_size", IMAGE_SIZE, [("IMAGE", "STRING", [1])], [("SIZE", "FP32", [2])])
    return repo
