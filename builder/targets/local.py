"""``local``: the pip-installed tritonserver, which has only the Python backend.

Each core model is served by the ``onnx_runner`` Python model running its variant's runtime (ONNX
Runtime or OpenVINO) on the CPU; every other verified ONNX Runtime variant is published
(``<model>_<precision>``) beside the served one.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.configs import (
    ONNX_FILE,
    local_queue_parameters,
    model_io_config,
    sequence_state_parameter,
    set_parameters,
)
from builder.python_models import model_sources, package
from builder.python_models.shared import onnx_contract as runner
from builder.records import EngineSummary, LLMBuild, ModelBuild
from builder.spec import Batching, ModelSpec, Precision, Runtime, Variant, as_variant
from builder.targets.base import ModelEntry, Target
from builder.targets.vllm_python import vllm_python_entry

ONNX_RUNNER = package("onnx_runner") / "model.py"
OPENVINO_CACHE = "openvino_cache"  # OpenVINO's compiled blobs, in the version folder
# A stateful model's runner: the 2.51 Python backend has no implicit state, so it keeps the states.
ONNX_SEQUENCE = package("onnx_sequence") / "model.py"


class LocalTarget(Target):
    name = "local"
    description = "the pip-installed tritonserver (Python backend only); the default without TensorRT"
    serves_spinning = True
    implicit_state = False  # the onnx_sequence model keeps the states per correlation id

    def serves(self, variant: Variant) -> bool:
        return True  # the onnx_runner runs every runtime (runtimes/)

    def beside(self, variant: Variant) -> bool:
        # ONNX Runtime's, as ever: an OpenVINO variant is served when it wins. Each published model
        # is a stub process of its own, and the zoo's would double (memory, start-up).
        return variant.runtime is Runtime.ONNXRUNTIME

    def core_models(self, build: ModelBuild, engines: EngineSummary | None) -> list[ModelEntry]:
        return [
            ModelEntry(
                config,
                {ONNX_FILE: build.variants[variant]},
                model_sources((ONNX_RUNNER if build.spec.sequence is None else ONNX_SEQUENCE).parent),
                variant=variant,
            )
            for _, variant, config in self.core_entries(build)
        ]

    def llm_models(self, build: LLMBuild) -> list[ModelEntry]:
        return [vllm_python_entry(build)]

    def core_config(
        self, model: ModelSpec, name: str, variant: Variant | Precision, *, alone: bool = False
    ) -> ModelConfig:
        variant = as_variant(variant)
        cfg = model_io_config(model, name)
        cfg.backend = "python"
        set_parameters(cfg, {runner.ONNX_FILE_KEY: ONNX_FILE, runner.PRECISION: variant.precision.value,
                             runner.INTRA_OP_THREADS: str(model.serve.threads)})  # fmt: skip
        if variant.runtime is not Runtime.ONNXRUNTIME:
            set_parameters(cfg, {runner.RUNTIME: variant.runtime.value})
        if variant.runtime is Runtime.OPENVINO:
            set_parameters(cfg, {runner.OPENVINO_CACHE: OPENVINO_CACHE})
        if alone:
            set_parameters(cfg, {runner.RUN_ALONE: "1"})
        if model.serve.spinning is not None:  # unset: the runner's rule (spin only with a core to spare)
            set_parameters(cfg, {runner.ALLOW_SPINNING: "1" if model.serve.spinning else "0"})
        if model.sequence is not None:
            set_parameters(cfg, {runner.SEQUENCE_STATE: sequence_state_parameter(model.sequence)})
        # Without Triton's policy the onnx_runner model can enforce the spec's bound itself.
        set_parameters(cfg, local_queue_parameters(model.batching, model.max_batch_size))
        return self._serving(cfg, model, queue_policy=self.writes_queue_policy(model.batching))

    def writes_queue_policy(self, batching: Batching) -> bool:
        # tritonserver 2.51's batcher stalls up to 500 ms whenever a queue policy is set
        # (bench/queue_stall.py); only where the spec asks for it.
        return batching.local_queue_policy
