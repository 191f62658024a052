"""Y = X, answered through the response sender before ``execute`` returns, which then lingers
``linger_ms``: the instance is busy for a while after its client has the answer, as any model
instance is for a moment. With a queue policy the 2.51 batcher wakes for the next request only
if an instance is waiting at that moment (bench/queue_stall.py), so a closed-loop client's next
request waits for the batcher's 500 ms idle timeout; without one it is prefetched."""

from __future__ import annotations

import json
import time
from typing import Any

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = json.loads(args["model_config"]).get("parameters", {})
        self.linger_s = float(params.get("linger_ms", {}).get("string_value", "5")) / 1000.0

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            response = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", x)])
            request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        time.sleep(self.linger_s)
