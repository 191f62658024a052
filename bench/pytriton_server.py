"""PyTriton serving an ONNX Runtime session with ``@batch``: what a Python user would write.

Run as a child process by bench/vs_pytriton.py:
    python -m bench.pytriton_server ONNX THREADS MAX_BATCH HTTP GRPC METRICS
Prints READY once the model is served, then serves until stdin closes (at most an hour).
Statistics are left unrestricted: perf_analyzer reads them over gRPC and cannot send PyTriton's
access token there (the other default-protected endpoints stay protected).
"""

from __future__ import annotations

import select
import sys
import time

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

from bench.common import ort_session

LIMIT_S = 3600


def main(argv: list[str]) -> None:
    onnx, threads, max_batch, http, grpc, metrics = argv
    session = ort_session(onnx, int(threads))
    inputs = session.get_inputs()
    outputs = session.get_outputs()
    names = [o.name for o in outputs]

    @batch
    def infer(**feed: np.ndarray) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, feed), strict=True))

    config = TritonConfig(
        http_address="127.0.0.1", http_port=int(http), grpc_address="127.0.0.1", grpc_port=int(grpc),
        metrics_address="127.0.0.1", metrics_port=int(metrics),
    )  # fmt: skip
    security = TritonSecurityConfig(
        restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"]
    )
    dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
    with Triton(config=config, security_config=security) as triton:
        triton.bind(
            model_name="pytriton_model",
            infer_func=infer,
            inputs=[Tensor(name=i.name, dtype=dtypes[i.type], shape=tuple(i.shape[1:])) for i in inputs],
            outputs=[Tensor(name=o.name, dtype=np.float32, shape=tuple(o.shape[1:])) for o in outputs],
            config=ModelConfig(max_batch_size=int(max_batch), batcher=DynamicBatcher()),
            strict=False,
        )
        triton.run()
        print("READY", flush=True)
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([sys.stdin], [], [], 1.0)
            if ready and not sys.stdin.read(1):
                break


if __name__ == "__main__":
    main(sys.argv[1:])
