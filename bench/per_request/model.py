"""Hand-written Python-backend model: one ONNX Runtime run per request, no batching.

What a first Triton Python model usually looks like; the per-request benchmark serves it beside
the builder's own model. ``model.onnx`` is copied beside this file by the builder (``files:``).
"""

import json
from pathlib import Path

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", "0"))
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            feed = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.input_names}
            outputs = self.session.run(self.output_names, feed)
            tensors = [pb_utils.Tensor(n, a) for n, a in zip(self.output_names, outputs, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
